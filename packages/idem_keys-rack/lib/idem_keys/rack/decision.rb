# frozen_string_literal: true

module IdemKeys
  module Rack
    # What the middleware decided inside a request's transaction: commit or roll back, then answer response, or
    # raise error (the app's exception, which goes on once the transaction has ended).
    Decision = Struct.new(:commit, :response, :error, keyword_init: true)
  end
end
