import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/**
 * Usage reports filtered by user (`/gateway/usage?user=`) aggregate in SQL: an index by user and
 * day reads only that user's rows of the range instead of every row of those days. The same DDL
 * on both backends (`"user"` quoted: a reserved word in PostgreSQL).
 */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX usage_user_day ON usage ("user", day)`
})
