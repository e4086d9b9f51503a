import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/** Usage rows name the key of a provider with several `apiKeys` that answered, by index (never the key). */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE usage ADD COLUMN key_index INTEGER`
})
