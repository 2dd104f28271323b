#!/usr/bin/env bash
# idem_keys-rack's own tests, on the stack it runs on ($IDEM_STACK: host, the default, or a Debian root through
# scripts/stacks.sh): builds the gem and installs it into .gem-home-$IDEM_STACK here (install.sh: once per change
# of the package's files), then runs test/*_test.rb with minitest against that installed gem (lib/ is not on the
# load path), on $DATABASE_URL: a database with idem_keys or its portable edition. Ruby, Rack, pg, ActiveRecord
# and minitest are Debian's packages: host (bookworm) Ruby 3.1, Rack 2.2, pg 1.4, ActiveRecord 6.1, minitest
# 5.17, the oldest end of the supported range; trixie Ruby 3.3, Rack 3.1, pg 1.5, ActiveRecord 7.2, the newest.
set -euo pipefail
cd "$(dirname "$0")"
: "${DATABASE_URL:?DATABASE_URL must name a database with idem_keys}"
stack=${IDEM_STACK:-host}
case $stack in
  host | trixie) packages=(ruby ruby-rack ruby-pg ruby-activerecord ruby-minitest) ;;
  *) echo "idem_keys-rack: not tested on stack '$stack' (host or trixie)" >&2; exit 2 ;;
esac
bash ../../scripts/apt_install.sh "idem_keys-rack" "${packages[@]}"
bash install.sh "$PWD/.gem-home-$stack"
echo "idem_keys-rack on $stack: Ruby $(ruby -e 'print RUBY_VERSION'), Rack $(ruby -rrack -e 'print Rack.release')," \
  "ActiveRecord $(ruby -ractive_record -e 'print ActiveRecord.version')"
# One process for every file; minitest prints "N runs, N assertions, N failures, N errors, N skips" (a skip fails:
# test/test_helper.rb).
env -u GEM_PATH GEM_HOME="$PWD/.gem-home-$stack" ruby -e 'ARGV.each { |f| require File.expand_path(f) }' test/*_test.rb
