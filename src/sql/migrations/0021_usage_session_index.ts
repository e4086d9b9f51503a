import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/** `/gateway/usage?session=<id>` reads one client session's rows by index, not by scanning its date range. */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX usage_client_session ON usage (client_session, day)`
})
