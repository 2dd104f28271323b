# frozen_string_literal: true

require_relative "lib/idem_keys/rack/version"

Gem::Specification.new do |spec|
  spec.name = "idem_keys-rack"
  spec.version = IdemKeys::Rack::VERSION
  spec.summary = "Idempotency-Key middleware for Rack and Rails on the idem_keys PostgreSQL extension"
  spec.description = <<~TEXT
    A Rack middleware (Rails: config.middleware.use) that reads the Idempotency-Key header, claims the key in
    PostgreSQL with the idem_keys extension (or its portable edition), runs the request at most once per key,
    stores the answer and replays it byte for byte to every retry. On the pg gem or ActiveRecord's connection;
    a transactional mode commits the claim, the handler's ActiveRecord writes and the answer in one transaction.
  TEXT
  spec.authors = ["idem_keys contributors"]
  spec.license = "PostgreSQL" # the same as idem_keys
  # No homepage yet: set it (and source_code_uri, changelog_uri) to the repository's public address on release.
  spec.metadata = { "rubygems_mfa_required" => "true" }
  spec.files = Dir["lib/**/*.rb"] + %w[README.md CHANGELOG.md idem_keys-rack.gemspec]
  spec.require_paths = ["lib"]

  # The supported range, tested at both ends (README, "Tests"): Ruby 3.1 with Rack 2.2, pg 1.4 and Rails 6.1
  # (Debian 12), and Ruby 3.3 with Rack 3.1, pg 1.5 and Rails 7.2 (Debian 13). ActiveRecord, for its connection,
  # is optional: not a dependency.
  spec.required_ruby_version = ">= 3.1"
  spec.add_dependency "pg", ">= 1.4", "< 2"
  spec.add_dependency "rack", ">= 2.2", "< 4"
end
