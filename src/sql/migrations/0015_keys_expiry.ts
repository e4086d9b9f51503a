import * as SqlClient from "@effect/sql/SqlClient"
import { Effect } from "effect"

/** Runtime keys may expire: epoch ms past which the key is refused everywhere (null: never). */
export default Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE runtime_keys ADD COLUMN expires_at BIGINT`
})
