import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/**
 * State that replicas share on PostgreSQL, kept in memory by a single SQLite gateway:
 *
 * - `held_items`: the output items of recent answers, for `item_reference` input items (spec 4.1:
 *   the last 1000 answers per app, one hour each). One row per item; `answer` numbers the answers
 *   of every replica in the order they were remembered (sequence `held_answers`), so that "the
 *   last 1000 answers" is the 1000 largest numbers of an app. `item` is the item's JSON text, as
 *   returned (not jsonb, which would reorder its keys).
 * - `response_tallies` (PostgreSQL only): records and bytes of stored responses per app, changed in
 *   the same transaction as the rows they count. Its row is also the app's lock: every change to an
 *   app's stored responses takes it first, so the caps hold for the app as a whole.
 * - `save_responses(…)` (PostgreSQL only): a save batch in one round trip (below).
 */
/**
 * One batch of stored responses saved in one call (one round trip, one atomic statement): the rows
 * inserted in the order given (`seq` keeps it), their apps' tallies moved (which locks each tally
 * row, in app order, until the commit, and answers totals that count every committed save of any
 * replica), then each app over a cap loses its oldest rows (this batch's included) until both caps
 * hold. Each statement in the function reads a snapshot of its own, taken after the tally locks:
 * it sees every row the tallies count. Rows and tallies change together or not at all.
 */
const SAVE_RESPONSES = `CREATE FUNCTION save_responses(
  p_ids text[], p_apps text[], p_created bigint[], p_expires bigint[], p_bytes bigint[], p_bodies bytea[],
  max_records bigint, max_bytes bigint
) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  t_apps text[];
  t_counts bigint[];
  t_bytes bigint[];
BEGIN
  WITH added AS (
    INSERT INTO responses (id, app, created_at, expires_at, bytes, body)
    SELECT r.id, r.app, r.created_at, r.expires_at, r.bytes, r.body
    FROM unnest(p_ids, p_apps, p_created, p_expires, p_bytes, p_bodies) WITH ORDINALITY AS r(id, app, created_at, expires_at, bytes, body, ord)
    ORDER BY r.ord
    RETURNING responses.app, responses.bytes
  ), tallied AS (
    INSERT INTO response_tallies AS t (app, count, bytes)
    SELECT added.app, COUNT(*), SUM(added.bytes) FROM added GROUP BY added.app ORDER BY added.app
    ON CONFLICT (app) DO UPDATE SET count = t.count + EXCLUDED.count, bytes = t.bytes + EXCLUDED.bytes
    RETURNING t.app, t.count, t.bytes
  )
  SELECT array_agg(tallied.app), array_agg(tallied.count), array_agg(tallied.bytes) INTO t_apps, t_counts, t_bytes FROM tallied;
  FOR i IN 1 .. coalesce(array_length(t_apps, 1), 0) LOOP
    IF t_bytes[i] > max_bytes THEN
      -- both caps: the shortest run of oldest rows that leaves at most max_records rows and max_bytes bytes
      WITH ranked AS (
        SELECT r.seq, ROW_NUMBER() OVER w AS n, SUM(r.bytes) OVER w - r.bytes AS before
        FROM responses r WHERE r.app = t_apps[i] WINDOW w AS (ORDER BY r.created_at, r.seq)
      ), gone AS (
        DELETE FROM responses d WHERE d.seq IN (SELECT ranked.seq FROM ranked WHERE ranked.n <= t_counts[i] - max_records OR ranked.before < t_bytes[i] - max_bytes)
        RETURNING d.bytes
      )
      UPDATE response_tallies t SET count = t.count - (SELECT COUNT(*) FROM gone), bytes = t.bytes - (SELECT COALESCE(SUM(gone.bytes), 0) FROM gone)
      WHERE t.app = t_apps[i];
    ELSIF t_counts[i] > max_records THEN
      WITH gone AS (
        DELETE FROM responses d WHERE d.seq IN (SELECT r.seq FROM responses r WHERE r.app = t_apps[i] ORDER BY r.created_at, r.seq LIMIT t_counts[i] - max_records)
        RETURNING d.bytes
      )
      UPDATE response_tallies t SET count = t.count - (SELECT COUNT(*) FROM gone), bytes = t.bytes - (SELECT COALESCE(SUM(gone.bytes), 0) FROM gone)
      WHERE t.app = t_apps[i];
    END IF;
  END LOOP;
END
$fn$`

export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () =>
      Effect.gen(function* () {
        yield* sql`CREATE SEQUENCE held_answers`
        yield* sql`CREATE TABLE held_items (
          answer BIGINT NOT NULL,
          app TEXT NOT NULL,
          response_id TEXT NOT NULL,
          item_id TEXT NOT NULL,
          item TEXT NOT NULL,
          expires_at BIGINT NOT NULL
        )`
        yield* sql`CREATE TABLE response_tallies (app TEXT PRIMARY KEY, count BIGINT NOT NULL, bytes BIGINT NOT NULL)`
        yield* sql`INSERT INTO response_tallies (app, count, bytes) SELECT app, COUNT(*), SUM(bytes) FROM responses GROUP BY app`
        yield* sql.unsafe(SAVE_RESPONSES)
      }),
    orElse: () => sql`CREATE TABLE held_items (
      answer INTEGER NOT NULL,
      app TEXT NOT NULL,
      response_id TEXT NOT NULL,
      item_id TEXT NOT NULL,
      item TEXT NOT NULL,
      expires_at INTEGER NOT NULL
    )`
  })
  // lookup of an item, the newest answer first
  yield* sql`CREATE INDEX held_items_item ON held_items (app, item_id, answer)`
  // an app's last answers
  yield* sql`CREATE INDEX held_items_answer ON held_items (app, answer)`
  // forgetting an answer (its stored response was deleted)
  yield* sql`CREATE INDEX held_items_response ON held_items (app, response_id)`
})
