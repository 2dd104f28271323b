# frozen_string_literal: true

# What the ActiveRecord tests share: ActiveRecord::Base on DATABASE_URL, the handler's model, and the checks that
# every test ends with each connection back in its pool and outside any transaction.
require_relative "test_helper"
require "active_record"

ActiveRecord::Base.establish_connection(DATABASE_URL)
ActiveRecord::Base.logger = nil
# Rails 6.1's railtie registers the handler by role, where its executor hooks look for the pools to give back
# (Rails 7.2 has one handler, always registered).
if ActiveRecord::Base.respond_to?(:legacy_connection_handling) && ActiveRecord::Base.legacy_connection_handling
  ActiveRecord::Base.connection_handlers = { ActiveRecord::Base.writing_role => ActiveRecord::Base.connection_handler }
end

# The handler's model: its writes go through ActiveRecord, on the thread's connection.
class RackTxPayment < ActiveRecord::Base
  self.table_name = "rack_ar_payments"
end

# A model whose database cannot be reached.
class Unreachable < ActiveRecord::Base
  self.abstract_class = true
  establish_connection("postgres://127.0.0.1:1/nowhere?connect_timeout=1")
end

module ActiveRecordHelpers
  include Helpers

  def create_tables
    Database.exec("CREATE TABLE IF NOT EXISTS rack_ar_payments (id bigserial PRIMARY KEY, tenant text NOT NULL, " \
                  "idempotency_key text, amount bigint NOT NULL)")
    Database.exec("CREATE TABLE IF NOT EXISTS rack_ar_guard (id int PRIMARY KEY DEFERRABLE INITIALLY DEFERRED)")
  end

  # Every connection of the model's pool back, and outside any transaction.
  def assert_pool_idle(model = ActiveRecord::Base)
    ActiveRecord::Base.connection_handler.clear_active_connections!
    pool = model.connection_pool
    assert pool.connections.none?(&:in_use?), "an ActiveRecord connection was left checked out"
    pool.connections.each do |c|
      assert_equal PG::PQTRANS_IDLE, c.raw_connection.transaction_status, "a connection was left in a transaction"
    end
  end

  # Seen from outside: on a connection of the tests' own, not ActiveRecord's. amount: only those of that amount.
  def payments(key = nil, amount: nil)
    Database.exec("SELECT count(*) FROM rack_ar_payments WHERE tenant = $1 AND ($2::text IS NULL OR " \
                  "idempotency_key = $2) AND ($3::bigint IS NULL OR amount = $3)", [tenant, key, amount])
            .getvalue(0, 0).to_i
  end
end
