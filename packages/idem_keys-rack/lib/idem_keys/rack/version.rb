# frozen_string_literal: true

module IdemKeys
  module Rack
    VERSION = "0.1.0"
  end
end
