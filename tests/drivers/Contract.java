// The idem_keys contract over JDBC (Debian's pgjdbc), run by tests/drivers/run.sh: claimed; in_progress with
// retry_after; replay with status, body and headers; mismatch; recovered after a short lease; an error's
// SQLSTATE. JDBC has no composite type: read idem_result's fields by name, (r).outcome and so on.
//   java -cp /usr/share/java/postgresql.jar tests/drivers/Contract.java JDBC_URL
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.UUID;

public class Contract {
    static final String CLAIM =
        "SELECT (r).outcome, (r).token, (r).attempt, (r).status_code, (r).response_bytes, (r).headers::text,"
        + " (r).retry_after FROM (SELECT idem_claim(?, ?, ?::jsonb, lease => ?::interval) AS r) s";
    static final String FINISH = "SELECT idem_finish(?, ?, ?, ?, ?::bytea, headers => ?::jsonb)";
    static final String BODY = "{\"amount\": 1000, \"currency\": \"EUR\"}";
    static final byte[] ANSWER = "{\"charge_id\":\"ch_1\", \"amount\":1000}".getBytes();
    static final String RUN = UUID.randomUUID().toString().substring(0, 8);
    static final List<String> failures = new ArrayList<>();

    record Claim(String outcome, Long token, Integer attempt, Integer status, byte[] body, String headers,
                 Integer retryAfter) {}

    static Claim claim(Connection c, String key, String body, String lease) throws SQLException {
        try (PreparedStatement st = c.prepareStatement(CLAIM)) {
            st.setString(1, "jdbc");
            st.setString(2, key);
            st.setString(3, body);
            st.setString(4, lease);
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                return new Claim(rs.getString(1), rs.getObject(2, Long.class), rs.getObject(3, Integer.class),
                    rs.getObject(4, Integer.class), rs.getBytes(5), rs.getString(6), rs.getObject(7, Integer.class));
            }
        }
    }

    static void finish(Connection c, String key, long token, int status, byte[] body, String headers)
            throws SQLException {
        try (PreparedStatement st = c.prepareStatement(FINISH)) {
            st.setString(1, "jdbc");
            st.setString(2, key);
            st.setLong(3, token);
            st.setInt(4, status);
            st.setBytes(5, body);
            st.setString(6, headers);
            st.executeQuery().close();
        }
    }

    static void check(String name, boolean ok, Object detail) {
        System.out.println((ok ? "PASS  " : "FAIL  ") + name + (ok ? "" : ": " + detail));
        if (!ok) failures.add(name);
    }

    public static void main(String[] args) throws Exception {
        try (Connection a = DriverManager.getConnection(args[0]); Connection b = DriverManager.getConnection(args[0])) {
            String key = RUN + "-pay";
            Claim first = claim(a, key, BODY, null);
            check("claimed: token and attempt 1", first.outcome().equals("claimed") && first.token() != null
                && first.attempt() == 1, first);
            finish(a, key, first.token(), 201, ANSWER, "{\"Location\": \"/ch_1\"}");
            Claim again = claim(b, key, BODY, null);
            check("replay: status, body byte for byte, headers", again.outcome().equals("replay")
                && again.status() == 201 && Arrays.equals(again.body(), ANSWER)
                && again.headers().equals("{\"Location\": \"/ch_1\"}"), again);
            check("mismatch", claim(b, key, "{\"amount\": 9999}", null).outcome().equals("mismatch"), "");

            Claim busy = claim(a, RUN + "-busy", BODY, "1 minute");
            Claim seen = claim(b, RUN + "-busy", BODY, null);
            check("in_progress with retry_after", busy.outcome().equals("claimed")
                && seen.outcome().equals("in_progress") && seen.retryAfter() >= 1, seen);

            Claim lapsed = claim(a, RUN + "-lapsed", BODY, "1 second");
            Thread.sleep(1200);
            Claim recovered = claim(b, RUN + "-lapsed", BODY, null);
            check("recovered after a short lease: attempt 2, a new token", recovered.outcome().equals("recovered")
                && recovered.attempt() == 2 && recovered.token() > lapsed.token(), recovered);

            String state = null;
            try {
                finish(a, RUN + "-busy", busy.token() + 1000, 200, ANSWER, null);
            } catch (SQLException e) {
                state = e.getSQLState();
            }
            check("an error's SQLSTATE: a finish by a token that does not own the key is 55000", "55000".equals(state),
                state);
        }
        System.out.println("jdbc contract: " + (failures.isEmpty() ? "all passed" : failures.size() + " failed"));
        System.exit(failures.isEmpty() ? 0 : 1);
    }
}
