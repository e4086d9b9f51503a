/**
 * ResponseStore alone: save latency at concurrency 1, saves per second at concurrency 64, get
 * latency; real SQLite in a temp dir. `node --import tsx scratchpad/store-micro/run.ts`
 */
import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { randomHex } from "../../src/domain/Ids.js"
import { Log } from "../../src/services/ops/Log.js"
import { ResponseStore, type StoredRecord } from "../../src/services/responses/ResponseStore.js"
import { sqliteLayer as databaseLayer } from "../../src/sql/Database.js"

const dir = fs.mkdtempSync(path.join(process.env.MICRO_DIR ?? os.tmpdir(), "store-micro-"))
const recordOf = (i: number): StoredRecord => {
  const id = `resp_${randomHex()}`
  return {
    id,
    app: "bench",
    createdAt: Date.now(),
    response: { id, object: "response", status: "completed", output: [{ type: "message", id: `msg_${randomHex()}`, content: [{ type: "output_text", text: `answer ${i} `.repeat(20) }] }] },
    input: [{ type: "message", id: `msg_${randomHex()}`, role: "user", content: [{ type: "input_text", text: `question ${i} `.repeat(20) }] }]
  }
}
const median = (xs: Array<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]

const program = Effect.gen(function* () {
  const store = yield* ResponseStore
  const lat: Array<number> = []
  for (let i = 0; i < 300; i++) {
    const t = performance.now()
    yield* store.save(recordOf(i), { maxAgeDays: 30 })
    lat.push(performance.now() - t)
  }
  console.log(`save c=1: p50 ${median(lat).toFixed(3)} ms`)
  const ids: Array<string> = []
  for (const c of [64]) {
    const n = 3000
    let next = 0
    const t = performance.now()
    yield* Effect.all(
      Array.from({ length: c }, () =>
        Effect.gen(function* () {
          while (next < n) {
            const r = recordOf(next++)
            ids.push(r.id)
            yield* store.save(r, { maxAgeDays: 30 })
          }
        })
      ),
      { concurrency: "unbounded" }
    )
    console.log(`save c=${c}: ${(n / ((performance.now() - t) / 1000)).toFixed(0)} saves/s`)
  }
  const glat: Array<number> = []
  for (const id of ids.slice(-300)) {
    const t = performance.now()
    yield* store.get("bench", id)
    glat.push(performance.now() - t)
  }
  console.log(`get: p50 ${median(glat).toFixed(3)} ms`)
})

await Effect.runPromise(
  Effect.scoped(program).pipe(Effect.provide(ResponseStore.layer(dir).pipe(Layer.provideMerge(Layer.merge(databaseLayer(dir), Log.layer(false))))))
)
fs.rmSync(dir, { recursive: true, force: true })
