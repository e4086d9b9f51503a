import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/** Usage rows name the client's session, agent and parent agent (issue 26; src/http/Attribution.ts), both backends. */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE usage ADD COLUMN client_session TEXT`
  yield* sql`ALTER TABLE usage ADD COLUMN agent TEXT`
  yield* sql`ALTER TABLE usage ADD COLUMN parent_agent TEXT`
})
