#!/usr/bin/env bash
# idem_keys-rack's own tests: builds the gem and installs it into .gem-home here (install.sh: once per change of
# the package's files), then runs test/*_test.rb with minitest against that installed gem (lib/ is not on the
# load path), on $DATABASE_URL: a database with idem_keys or its portable edition. Ruby, Rack, pg, ActiveRecord
# and minitest are Debian's packages (bookworm: Ruby 3.1, Rack 2.2, pg 1.4, ActiveRecord 6.1, minitest 5.17).
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys}"
bash ../../scripts/apt_install.sh "idem_keys-rack" ruby ruby-rack ruby-pg ruby-activerecord ruby-minitest
bash install.sh "$PWD/.gem-home"
# One process for every file; minitest prints "N runs, N assertions, N failures, N errors, N skips" (a skip fails:
# test/test_helper.rb).
env -u GEM_PATH GEM_HOME="$PWD/.gem-home" ruby -e 'ARGV.each { |f| require File.expand_path(f) }' test/*_test.rb
