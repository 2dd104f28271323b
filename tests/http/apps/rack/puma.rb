# frozen_string_literal: true

# puma for the plain Rack sample app (serve.sh): single mode (no workers, so the suite's SIGKILL ends the server),
# a fixed pool of threads, loopback only. PORT comes from serve.sh.
bind "tcp://127.0.0.1:#{ENV.fetch('PORT')}"
threads 16, 16
environment "production"
rackup File.join(__dir__, "config.ru")
# In the process title, where tests/http/run.sh's clean-up looks for what it started.
tag "tests/http/apps/rack"
# A short graceful stop: the suite's SIGTERM should not wait out a handler sleeping for a minute.
force_shutdown_after 2
