import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/**
 * Usage rows by app: whether an app has any recorded usage (`/gateway/usage?app=` accepts an app
 * whose keys are gone but whose usage remains) is one index lookup, not a scan of every row.
 */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE INDEX usage_app ON usage (app)`
})
