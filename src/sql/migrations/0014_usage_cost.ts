import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/** Usage rows carry what the call cost in USD: null when the model that answered has no price. */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql.onDialectOrElse({
    pg: () => sql`ALTER TABLE usage ADD COLUMN cost_usd DOUBLE PRECISION`,
    orElse: () => sql`ALTER TABLE usage ADD COLUMN cost_usd REAL`
  })
})
