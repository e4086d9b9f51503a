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
 */
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
