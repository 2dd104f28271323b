# frozen_string_literal: true

module IdemKeys
  module Rack
    # Inside the middleware's transaction, the app's `transaction` blocks (its own, and the one every save and
    # destroy opens) are savepoints of it, as they are real transactions without the middleware: a
    # `raise ActiveRecord::Rollback`, or a save that returns false, undoes what the block did and nothing else
    # (joining the middleware's transaction, it would be swallowed and committed with the key). Not
    # `joinable: false` on the middleware's transaction, which makes ActiveRecord run the app's after_commit
    # callbacks when each savepoint is released, before the key's COMMIT, even when that then rolls back: here
    # their records join the middleware's transaction, and the callbacks run after its COMMIT. Blocks nested in
    # the app's own are ActiveRecord's as ever (a plain nested block joins the app's).
    module HandlerSavepoints
      # The middleware's ActiveRecord transaction on this connection, while the handler runs in it.
      attr_accessor :idem_keys_transaction

      # ActiveRecord's public DatabaseStatements#transaction, whose keywords have been these since Rails 5.
      def transaction(requires_new: nil, **options, &block)
        ours = idem_keys_transaction
        requires_new = true if ours && ours.equal?(current_transaction)
        super(requires_new: requires_new, **options, &block)
      end

      # Runs the block with ar's `transaction` blocks as savepoints of ours (an ActiveRecord transaction).
      def self.around(ar, ours)
        ar.singleton_class.prepend(self) unless ar.singleton_class.include?(self)
        outer = ar.idem_keys_transaction
        begin
          ar.idem_keys_transaction = ours
          yield
        ensure
          ar.idem_keys_transaction = outer
        end
      end
    end
  end
end
