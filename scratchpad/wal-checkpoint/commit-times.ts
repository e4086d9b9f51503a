/**
 * The longest COMMIT on the writing connection with SQLite's own checkpoints (wal_autocheckpoint
 * 1000, the default) against none (0, the gateway's: a worker thread checkpoints). 3000 pages in
 * transactions of ten 3000-byte rows, synchronous=FULL as the gateway runs.
 * `node --import tsx scratchpad/wal-checkpoint/commit-times.ts`
 */
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { driverModule } from "../../src/sql/SqliteClient.js"

interface Db {
  pragma(source: string): unknown
  prepare(sql: string): { run(...params: Array<unknown>): unknown }
  close(): void
}
const Database = createRequire(import.meta.url)(driverModule(Number(process.versions.napi))) as new (file: string) => Db

for (const autocheckpoint of [1000, 0]) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "commit-times-"))
  const db = new Database(path.join(dir, "test.db"))
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = FULL")
  db.pragma(`wal_autocheckpoint = ${autocheckpoint}`)
  db.prepare("CREATE TABLE t (b BLOB)").run()
  const begin = db.prepare("BEGIN")
  const insert = db.prepare("INSERT INTO t (b) VALUES (randomblob(3000))")
  const commit = db.prepare("COMMIT")
  const times: Array<number> = []
  for (let i = 0; i < 300; i++) {
    begin.run()
    for (let j = 0; j < 10; j++) insert.run()
    const t0 = performance.now()
    commit.run()
    times.push(performance.now() - t0)
  }
  times.sort((a, b) => a - b)
  const at = (q: number) => times[Math.min(times.length - 1, Math.ceil(q * times.length) - 1)].toFixed(2)
  console.log(`wal_autocheckpoint=${autocheckpoint}: COMMIT median ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${at(1)} ms, WAL ${fs.statSync(path.join(dir, "test.db-wal")).size} bytes`)
  db.close()
  fs.rmSync(dir, { recursive: true, force: true })
}
