/**
 * `npm run bench -- --websocket` (issue 26): a 20-turn Codex-style conversation over one Responses
 * WebSocket (each turn only its new input, chained by `previous_response_id` to the connection's
 * last response, `store: false`) against the same conversation over HTTP (each turn the whole
 * history, as Codex sends it without the socket). One gateway (`dist/main.js`, the `mock` provider
 * answering each turn with a fixed 40-word text), rounds alternated WS, HTTP, WS, ... so the machine's
 * drift cancels; each round is one whole conversation.
 *
 * Figures per turn: the gateway's CPU (its threads' schedstat run time from /proc over the
 * conversation / 20) and the
 * bytes the gateway received (request bodies over HTTP, message payloads over the socket; the HTTP
 * form also pays its request line and headers, not counted here). Medians over the rounds.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import WebSocket from "ws"
import { cpuBetween, readCpu } from "./costs.js"
import { repoRoot, startServer, type Server } from "./procs.js"

const TURNS = 20
const KEY = "sk-bench-websocket-0123456789"

export interface WebSocketBenchReport {
  readonly table: string
  readonly rounds: number
  readonly rows: ReadonlyArray<{ readonly transport: "websocket" | "http"; readonly cpuMsPerTurn: number; readonly bytesPerTurn: number }>
}

const config = (dataDir: string) => `
listen: { host: 127.0.0.1, port: 0 }
dataDir: ${JSON.stringify(dataDir)}
accessLog: false
keys: [{ key: ${KEY}, app: bench }]
providers:
  mock: { type: mock }
`

type Item = Record<string, unknown>
const userTurn = (turn: number): Item => ({ type: "message", role: "user", content: [{ type: "input_text", text: `Turn ${turn}: look at the next file and tell me what it does, briefly.` }] })

/** the gateway's CPU over `work`, ms (its threads' schedstat run time where readable, else utime + stime) */
const cpuOver = async <A>(pid: number, work: () => Promise<A>): Promise<{ readonly ms: number; readonly value: A }> => {
  const before = readCpu(pid)
  const value = await work()
  const after = readCpu(pid)
  if (before === undefined || after === undefined) throw new Error("the gateway's /proc entry is not readable")
  return { ms: cpuBetween(before, after).ns / 1e6, value }
}

/** the output items of a `response.completed` event, as a client keeps them for its next turn */
const outputOf = (completed: { readonly response?: { readonly output?: ReadonlyArray<Item> } }): ReadonlyArray<Item> => completed.response?.output ?? []

const overHttp = async (url: string): Promise<number> => {
  const history: Array<Item> = []
  let bytes = 0
  for (let turn = 0; turn < TURNS; turn++) {
    history.push(userTurn(turn))
    const body = JSON.stringify({ model: "mock/echo", input: history, stream: true, store: false })
    bytes += Buffer.byteLength(body)
    const res = await fetch(`${url}/v1/responses`, { method: "POST", headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" }, body })
    const text = await res.text()
    if (res.status !== 200) throw new Error(`HTTP turn ${turn}: ${res.status} ${text.slice(0, 300)}`)
    const completed = text
      .split("\n")
      .filter((l) => l.startsWith("data: "))
      .map((l) => JSON.parse(l.slice(6)) as { readonly type: string; readonly response?: { readonly output?: ReadonlyArray<Item> } })
      .find((e) => e.type === "response.completed")
    if (completed === undefined) throw new Error(`HTTP turn ${turn}: no response.completed`)
    history.push(...outputOf(completed))
  }
  return bytes
}

const overSocket = (url: string): Promise<number> =>
  new Promise((resolve, reject) => {
    const ws = new WebSocket(`${url.replace("http", "ws")}/v1/responses`, { headers: { authorization: `Bearer ${KEY}`, "openai-beta": "responses_websockets=2026-02-06" } })
    let bytes = 0
    let turn = 0
    let previous: string | undefined
    const send = () => {
      const message = JSON.stringify({ type: "response.create", model: "mock/echo", input: [userTurn(turn)], store: false, ...(previous !== undefined ? { previous_response_id: previous } : {}) })
      bytes += Buffer.byteLength(message)
      ws.send(message)
    }
    ws.on("open", send)
    ws.on("error", reject)
    ws.on("message", (data) => {
      const event = JSON.parse(String(data)) as { type: string; response?: { id?: string }; error?: unknown }
      if (event.type === "error" || event.type === "response.failed") return reject(new Error(`socket turn ${turn}: ${String(data).slice(0, 300)}`))
      if (event.type !== "response.completed") return
      previous = event.response?.id
      turn++
      if (turn < TURNS) return send()
      ws.close()
      resolve(bytes)
    })
  })

const median = (values: ReadonlyArray<number>): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2
}

export const runWebSocketBench = async (settings: { readonly rounds: number }, log: (line: string) => void): Promise<WebSocketBenchReport> => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-ws-bench-"))
  const file = path.join(dir, "gateway.yaml")
  fs.writeFileSync(file, config(path.join(dir, "data")))
  let gateway: Server | undefined
  try {
    gateway = await startServer("gateway", process.execPath, [path.join(repoRoot, "dist/main.js"), "--config", file], { cwd: dir })
    const { pid, url } = gateway
    // warm-up: one conversation of each
    await overSocket(url)
    await overHttp(url)
    const samples = { websocket: { cpu: [] as Array<number>, bytes: [] as Array<number> }, http: { cpu: [] as Array<number>, bytes: [] as Array<number> } }
    for (let round = 0; round < settings.rounds * 2; round++) {
      const transport = round % 2 === 0 ? "websocket" : "http"
      const { ms, value: bytes } = await cpuOver(pid, () => (transport === "websocket" ? overSocket(url) : overHttp(url)))
      samples[transport].cpu.push(ms / TURNS)
      samples[transport].bytes.push(bytes / TURNS)
      log(`websocket bench round ${round + 1}/${settings.rounds * 2}: ${transport}`)
    }
    const rows = (["websocket", "http"] as const).map((transport) => ({ transport, cpuMsPerTurn: Math.round(median(samples[transport].cpu) * 1000) / 1000, bytesPerTurn: Math.round(median(samples[transport].bytes)) }))
    const [ws, http] = rows
    const table = [
      `${"transport".padEnd(10)}  ${"gateway CPU per turn".padStart(20)}  ${"bytes received per turn".padStart(24)}`,
      ...rows.map((r) => `${r.transport.padEnd(10)}  ${`${r.cpuMsPerTurn.toFixed(3)} ms`.padStart(20)}  ${String(r.bytesPerTurn).padStart(24)}`),
      "",
      `a ${TURNS}-turn conversation, median of ${settings.rounds} rounds each, alternated: the socket costs ${(ws.cpuMsPerTurn / http.cpuMsPerTurn).toFixed(2)}x the CPU and ${(ws.bytesPerTurn / http.bytesPerTurn).toFixed(2)}x the bytes of HTTP per turn`
    ].join("\n")
    return { table, rounds: settings.rounds, rows }
  } finally {
    await gateway?.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  }
}
