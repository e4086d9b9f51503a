/**
 * Process hygiene of test/support/GeminiCli.ts: a run against a server that never answers is
 * killed (a) by kill() mid-run, (b) by its timeout, (c) by disposeAllGeminiCli(); afterwards no
 * process carrying a run marker is left and the directories are gone.
 *
 *   npx tsx scratchpad/gemini-capture/hygiene.ts
 */
import { createServer } from "node:http"
import type { AddressInfo, Socket } from "node:net"
import * as fs from "node:fs"
import { disposeAllGeminiCli, liveGeminiCliPids, runGeminiCli, startGeminiCli } from "../../test/support/GeminiCli.js"

const sockets = new Set<Socket>()
let hits = 0
const server = createServer(() => {
  hits++ // never answer
})
server.on("connection", (s: Socket) => {
  sockets.add(s)
  s.on("close", () => sockets.delete(s))
})
await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
const check = (label: string, ok: boolean) => console.log(`${ok ? "ok  " : "FAIL"} ${label}`)
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const waitHits = async (n: number) => {
  for (let i = 0; i < 100 && hits < n; i++) await sleep(100)
}

// (a) kill mid-run
const a = startGeminiCli({ baseUrl, model: "m", prompt: "Say hi" })
await waitHits(1)
check("a: request arrived", hits >= 1)
check("a: processes alive before kill (CLI + relaunched child)", liveGeminiCliPids().length >= 2)
a.kill()
const ra = await a.result
check(`a: killed (signal=${ra.signal})`, ra.signal === "SIGKILL")
await a.dispose()
check("a: nothing left", liveGeminiCliPids().length === 0)
check("a: dirs removed", !fs.existsSync(a.workDir) && !fs.existsSync(a.home))

// (b) timeout
const hb = hits
const rb = await runGeminiCli({ baseUrl, model: "m", prompt: "Say hi", timeoutMs: 5000 })
check(`b: timedOut=${rb.timedOut} after ${rb.durationMs}ms, request arrived=${hits > hb}`, rb.timedOut && hits > hb)
await rb.dispose()
check("b: nothing left", liveGeminiCliPids().length === 0)

// (c) disposeAll with two runs in flight
const hc = hits
startGeminiCli({ baseUrl, model: "m", prompt: "one" })
startGeminiCli({ baseUrl, model: "m", prompt: "two" })
await waitHits(hc + 2)
check(`c: both requests arrived (${hits - hc})`, hits - hc >= 2)
await disposeAllGeminiCli()
check("c: nothing left", liveGeminiCliPids().length === 0)

for (const s of sockets) s.destroy()
server.close()
