import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/**
 * Stored responses kept in their row: `body` holds the stored form of a small record (the bytes a
 * record file would hold), so saving it costs no file and no fsync of its own, only its share of
 * the transaction's commit. Null for a record kept as `<dataDir>/responses/<id>.json`. Added last,
 * so reading the other columns never touches a body's overflow pages.
 */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () => sql`ALTER TABLE responses ADD COLUMN body BYTEA`,
    orElse: () => sql`ALTER TABLE responses ADD COLUMN body BLOB`
  })
})
