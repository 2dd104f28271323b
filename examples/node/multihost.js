// node-postgres connects to one host. libpq, pgx and JDBC take several (postgres://u@h1:5432,h2:5432/db with
// target_session_attrs=read-write) and use the first that accepts writes, which is how an application follows
// an HA manager's failover. poolConfig() gives pg.Pool the same: each new pooled connection tries the hosts in
// order and keeps the first one that is up (and, with read-write, not read-only). A one-host string is passed
// through unchanged.
import pg from 'pg';

export function poolConfig(url) {
  const m = /^(postgres(?:ql)?:\/\/)([^@/]*@)?([^/?]*)(.*)$/.exec(url);
  const hosts = m ? m[3].split(',') : [];
  const query = new URLSearchParams(url.includes('?') ? url.slice(url.indexOf('?') + 1) : '');
  // pg's own client ignores libpq's connect_timeout: give it as connectionTimeoutMillis.
  const timeout = query.has('connect_timeout') ? { connectionTimeoutMillis: Number(query.get('connect_timeout')) * 1000 } : {};
  if (hosts.length < 2) return { connectionString: url, ...timeout };
  const readWrite = query.get('target_session_attrs') === 'read-write';
  const candidates = hosts.map((hostPort) => {
    const at = hostPort.lastIndexOf(':');
    return at < 0 ? { host: hostPort, port: 5432 } : { host: hostPort.slice(0, at), port: Number(hostPort.slice(at + 1)) };
  });
  const oneHost = ({ host, port }) => `${m[1]}${m[2] || ''}${host}:${port}${m[4]}`;

  // The first candidate that takes the connection (and writes, if asked), found with a throwaway client: a pg
  // Client connects only once, so the pooled one is pointed at the winner before it connects.
  async function pick() {
    let last = new Error('no host in DATABASE_URL accepts writes');
    for (const candidate of candidates) {
      const probe = new pg.Client({ connectionString: oneHost(candidate), ...timeout });
      try {
        await probe.connect();
        if (!readWrite) return candidate;
        const { rows } = await probe.query('SHOW transaction_read_only');
        if (rows[0].transaction_read_only === 'off') return candidate;
      } catch (err) {
        last = err;
      } finally {
        await probe.end().catch(() => {});
      }
    }
    throw last;
  }

  class FailoverClient extends pg.Client {
    connect(callback) {
      const connected = pick().then(({ host, port }) => {
        this.host = this.connectionParameters.host = host;
        this.port = this.connectionParameters.port = port;
        return super.connect();
      });
      if (!callback) return connected;
      connected.then(() => callback(null, this), (err) => callback(err));
      return undefined;
    }
  }
  // The pool's timeout covers a whole connect(), which may try every host in turn: give it all their time.
  const pooled = timeout.connectionTimeoutMillis
    ? { connectionTimeoutMillis: timeout.connectionTimeoutMillis * candidates.length + 1000 } : {};
  return { connectionString: oneHost(candidates[0]), Client: FailoverClient, ...pooled };
}
