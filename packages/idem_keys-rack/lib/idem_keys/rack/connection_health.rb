# frozen_string_literal: true

require "io/wait"
require "pg"

module IdemKeys
  module Rack
    # Whether a pooled PG::Connection can be used as it is, and how to make it usable again. A pool of
    # PG::Connection (the connection_pool gem's) has no way to throw a connection away, so a broken one is reset
    # in place: the same object, a new session.
    module ConnectionHealth
      IN_TRANSACTION = [PG::PQTRANS_INTRANS, PG::PQTRANS_INERROR].freeze

      module_function

      # Lost or closed (CONNECTION_BAD, PQTRANS_UNKNOWN); interrupted mid-statement (PQTRANS_ACTIVE: the answer is
      # still on its way, and the next statement would first wait it out); or closed by the server while it sat
      # idle in the pool (a restart, a failover, pg_terminate_backend), which libpq learns only by reading.
      def broken?(conn)
        return true if conn.status != PG::CONNECTION_OK

        case conn.transaction_status
        when PG::PQTRANS_UNKNOWN, PG::PQTRANS_ACTIVE then true
        when PG::PQTRANS_IDLE then closed_by_server?(conn)
        else false
        end
      end

      # An idle session is sent nothing unasked but notices and notifications, so anything waiting on its socket
      # is read: the server's goodbye is a FATAL message, then the end of the stream, which the next read finds
      # (and raises on). No round trip, so it can run on every checkout.
      def closed_by_server?(conn)
        3.times do
          return false unless conn.socket_io.wait_readable(0)

          conn.consume_input
        end
        conn.status != PG::CONNECTION_OK
      rescue PG::Error, IOError, SystemCallError
        true
      end

      # A new session on the same connection; raises PG::Error when the server cannot be reached.
      def reset(conn)
        cancel_running(conn)
        conn.reset
      end

      # Cancels a statement still running (interrupted: its answer is still on the way) and reads its answer, so the
      # connection is idle, or in its transaction (aborted), again. Closing the socket alone would leave the
      # statement running, holding its locks, until it next writes to the client; and the next statement sent
      # would first wait for it to end.
      def cancel_running(conn)
        return unless conn.status == PG::CONNECTION_OK && conn.transaction_status == PG::PQTRANS_ACTIVE

        # cancel answers nil once the server took the request; otherwise the statement runs on, not waited for.
        conn.discard_results if conn.cancel.nil?
      rescue PG::Error, IOError, SystemCallError
        nil # broken? still says so: reset
      end

      # Before conn goes back to the pool: outside any transaction and usable, or reset. Never raises: a reset that
      # fails (the server is still away) leaves the connection broken, and the next checkout tries again.
      def tidy(conn)
        cancel_running(conn)
        # A ROLLBACK that an interrupt (Rack::Timeout) cut short would hand the next request a transaction.
        Thread.handle_interrupt(Object => :never) do
          conn.exec("ROLLBACK") if conn.status == PG::CONNECTION_OK && IN_TRANSACTION.include?(conn.transaction_status)
        rescue PG::Error
          nil # lost with the connection: reset below
        end
        reset(conn) if broken?(conn)
      rescue PG::Error, IOError, SystemCallError
        nil
      end
    end
  end
end
