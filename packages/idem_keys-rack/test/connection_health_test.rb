# frozen_string_literal: true

require_relative "test_helper"
require "socket"

# A TCP proxy in front of the database whose connections can be held: what the client sends then goes nowhere
# and nothing comes back, as on a connection whose server's address vanished (a failover), until released.
# Connections opened afterwards pass.
class HoldingProxy
  attr_reader :port

  def initialize(host, port)
    @server = TCPServer.new("127.0.0.1", 0)
    @port = @server.addr[1]
    @lock = Mutex.new
    @links = []
    @held_bytes = 0
    @acceptor = Thread.new do
      loop do
        client = @server.accept
        link = { client: client, upstream: TCPSocket.new(host, port), release: nil }
        @lock.synchronize { @links << link }
        [[link[:client], link[:upstream], true], [link[:upstream], link[:client], false]].each do |from, to, outbound|
          Thread.new { pump(link, from, to, outbound) }
        end
      end
    rescue IOError, SystemCallError
      nil # closed
    end
  end

  # Holds every connection open now.
  def hold!
    @lock.synchronize { @links.each { |link| link[:release] ||= Queue.new } }
  end

  def release!
    @lock.synchronize do
      @links.each do |link|
        link[:release]&.close
        link[:release] = nil
      end
    end
  end

  # Bytes the client sent into a held connection.
  def held_bytes
    @lock.synchronize { @held_bytes }
  end

  def close
    release!
    @server.close
    @lock.synchronize { @links.each { |link| [link[:client], link[:upstream]].each(&:close) } }
  rescue IOError
    nil
  end

  private

  def pump(link, from, to, outbound)
    loop do
      data = from.readpartial(65_536)
      release = @lock.synchronize do
        @held_bytes += data.bytesize if link[:release] && outbound
        link[:release]
      end
      release&.pop # blocks while held; returns nil once released
      to.write(data)
    end
  rescue IOError, SystemCallError
    [from, to].each { |io| io.close rescue nil } # rubocop:disable Style/RescueModifier -- either may be closed
  end
end

# ConnectionHealth on its own: a connection given back to the pool is tidied (its transaction rolled back), and
# that never outlasts an interrupt (Rack::Timeout), even on a connection whose server is gone.
class ConnectionHealthTest < Minitest::Test
  include Helpers

  Health = IdemKeys::Rack::ConnectionHealth

  def setup
    info = PG::Connection.conninfo_parse(DATABASE_URL).to_h { |o| [o[:keyword].to_sym, o[:val]] }
    @proxy = HoldingProxy.new(info[:hostaddr] || info[:host], (info[:port] || 5432).to_i)
    @conn = PG.connect(DATABASE_URL, host: "127.0.0.1", port: @proxy.port, application_name: session_name("health"))
  end

  def teardown
    @proxy.close
    @conn.close
  end

  # The ROLLBACK before the connection goes back waits for an answer that never comes: the interrupt ends the
  # wait, and the connection is left to be reset (the server, if it is still there, rolls back the transaction
  # of a session that closed), never handed out in a transaction.
  def test_an_interrupt_ends_a_rollback_that_gets_no_answer
    @conn.exec("BEGIN")
    @proxy.hold!
    tidying = later { Health.tidy(@conn) }
    wait_until("the ROLLBACK is sent") { @proxy.held_bytes.positive? }
    tidying.raise(RequestTimeout, "the request ran out of time")
    interrupted = begin
      tidying.join(10)
    rescue RequestTimeout
      true
    end
    @proxy.release! # the unfixed code goes on, then, and the thread ends
    assert interrupted, "the interrupt waited for the ROLLBACK's answer"
    assert Health.broken?(@conn), "an interrupted ROLLBACK left the connection as if usable"
    Health.reset(@conn)
    assert_equal [PG::PQTRANS_IDLE, "1"], [@conn.transaction_status, @conn.exec("SELECT 1").getvalue(0, 0)]
  end

  def test_a_connection_in_a_transaction_is_rolled_back
    @conn.exec("BEGIN")
    @conn.exec("SELECT 1")
    Health.tidy(@conn)
    assert_equal PG::PQTRANS_IDLE, @conn.transaction_status
    refute Health.broken?(@conn)
  end
end
