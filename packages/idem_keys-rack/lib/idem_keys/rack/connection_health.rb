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
        return unless running?(conn)

        # cancel answers nil once the server took the request; otherwise the statement runs on, not waited for.
        conn.discard_results if conn.cancel.nil?
      rescue PG::Error, IOError, SystemCallError
        nil # broken? still says so: reset
      end

      # A statement was sent on conn and its answer is still to be read.
      def running?(conn)
        conn.status == PG::CONNECTION_OK && conn.transaction_status == PG::PQTRANS_ACTIVE
      rescue PG::Error
        false
      end

      # Closes the session without waiting for anything (not even a ROLLBACK's answer): the server, if it is still
      # there, rolls back the transaction of a session that ended, and the connection, now broken, is reset by the
      # next checkout.
      def abandon(conn)
        conn.reset_start
      rescue PG::Error
        nil # broken all the same
      end

      # Before conn goes back to the pool: outside any transaction and usable, or broken (reset by the next
      # checkout), never in a transaction, where no checkout would take it again. Never raises an error of its
      # own: a reset that fails (the server is still away) leaves the connection broken for the next checkout.
      #
      # An interrupt (Rack::Timeout) may end any of its waits: the ROLLBACK's answer, on a connection whose server
      # vanished (a failover that moved the address), never comes until TCP gives up. Interrupted in its
      # transaction or waiting for the ROLLBACK, the session is abandoned, with interrupts held back so that a
      # second one cannot cut that short; interrupted with a statement still running, or in a reset, the
      # connection is broken and the next checkout resets it.
      def tidy(conn)
        rollback_sent = false
        Thread.handle_interrupt(Object => :never) do
          Thread.handle_interrupt(Object => :immediate) do
            cancel_running(conn)
            if in_transaction?(conn)
              rollback_sent = true
              begin
                conn.exec("ROLLBACK")
              rescue PG::Error
                nil # lost with the connection: reset below
              end
              rollback_sent = false
            end
            reset(conn) if broken?(conn)
          end
        rescue Exception # rubocop:disable Lint/RescueException -- whatever ended the wait, the session is closed
          abandon(conn) if rollback_sent || in_transaction?(conn)
          raise
        end
      rescue PG::Error, IOError, SystemCallError
        nil
      end

      # In a transaction, and not waiting for an answer.
      def in_transaction?(conn)
        conn.status == PG::CONNECTION_OK && IN_TRANSACTION.include?(conn.transaction_status)
      rescue PG::Error
        false
      end
    end
  end
end
