/**
 * Capture what the real Gemini CLI sends to a Gemini API endpoint, and what it accepts.
 *
 *   npx tsx scratchpad/gemini-capture/capture.ts [scenario ...]      (default: plain auto tool)
 *
 * Starts a node:http server on 127.0.0.1 (random port) that records every request (method, path,
 * query, headers with the key value redacted, JSON body) and answers Gemini-native responses:
 *   :streamGenerateContent?alt=sse  one SSE event `data: {candidates,usageMetadata,...}\r\n\r\n`
 *   :generateContent                the same object as JSON
 *   :countTokens                    {"totalTokens":5}
 *   generationConfig.responseJsonSchema  -> text = JSON made to match the schema
 * runs the CLI through test/support/GeminiCli.ts, and writes
 * scratchpad/gemini-capture/samples/<scenario>/{req-N.json, run.json, netlog.jsonl}.
 * Every node process of the CLI is preloaded with netlog.cjs (socket connects, DNS lookups, spawns).
 */
import { createServer } from "node:http"
import type { IncomingMessage, ServerResponse } from "node:http"
import type { AddressInfo, Socket } from "node:net"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { liveGeminiCliPids, runGeminiCli, type GeminiCliOptions, NO_RETRIES } from "../../test/support/GeminiCli.js"

type Json = Record<string, unknown>

const here = path.dirname(fileURLToPath(import.meta.url))
const KEY = "capture-secret-key-123"

// ---------------------------------------------------------------------------------------------
// Recording
// ---------------------------------------------------------------------------------------------

interface Recorded {
  seq: number
  /** ms since the run started */
  t: number
  method: string
  path: string
  query: Record<string, string>
  headers: Record<string, string | string[] | undefined>
  bodyBytes: number
  body: unknown
  /** what the server answered (summary) */
  answer?: unknown
}

const redactHeaders = (headers: IncomingMessage["headers"]): Recorded["headers"] => {
  const out: Recorded["headers"] = {}
  for (const [k, v] of Object.entries(headers)) {
    if (k === "x-goog-api-key" || k === "authorization" || k === "x-genai-api-key") {
      const s = String(v)
      out[k] = `<redacted: ${s === KEY || s === `Bearer ${KEY}` ? "the key" : "OTHER VALUE"}, ${s.length} chars>`
    } else out[k] = v
  }
  return out
}

// ---------------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------------

const usage = { promptTokenCount: 5, candidatesTokenCount: 2, totalTokenCount: 7 }
let responseCounter = 0
const candidateResponse = (parts: Json[], finishReason = "STOP"): Json => ({
  candidates: [{ content: { role: "model", parts }, finishReason, index: 0 }],
  usageMetadata: usage,
  modelVersion: "x",
  responseId: `r${++responseCounter}`
})

/** A JSON value matching a JSON schema (enough for the CLI's own schemas): enums → `choose` or the first value. */
const sampleFromSchema = (schema: unknown, choose: (p: string, options: unknown[]) => unknown, at = "", score = 10): unknown => {
  if (schema === null || typeof schema !== "object") return null
  const s = schema as Json
  if (Array.isArray(s.enum) && s.enum.length > 0) return choose(at, s.enum)
  if (s.const !== undefined) return s.const
  // the CLI's schemas use the Gemini `Type` enum spelling ("OBJECT", "STRING", "INTEGER")
  const type = String(Array.isArray(s.type) ? s.type[0] : s.type).toLowerCase()
  if (Array.isArray(s.anyOf) && s.anyOf.length > 0) return sampleFromSchema(s.anyOf[0], choose, at, score)
  switch (type) {
    case "object": {
      const props = (s.properties ?? {}) as Record<string, unknown>
      const out: Json = {}
      for (const [k, v] of Object.entries(props)) out[k] = sampleFromSchema(v, choose, at === "" ? k : `${at}.${k}`, score)
      return out
    }
    case "array":
      return [sampleFromSchema(s.items, choose, `${at}[]`, score)]
    case "string":
      return at.toLowerCase().includes("reason") ? "Simple greeting; a fast model is enough." : "x"
    case "number":
    case "integer":
      return at.includes("score") ? score : 1
    case "boolean":
      return false
    default:
      return null
  }
}

interface Scenario {
  options: Omit<GeminiCliOptions, "baseUrl">
  /** answer for a main (tools-carrying) request; `turn` counts main requests from 0 */
  main: (body: Json, turn: number) => Json[]
  /** HTTP failure to inject before answering: return a status (and count) or undefined */
  fail?: (seq: number, action: string) => { status: number; body: Json } | undefined
  /** enum choice for schema answers */
  choose?: (at: string, options: unknown[]) => unknown
  /** the router's complexity_score (1-100; >= 90 routes to pro). Default 10. */
  routerScore?: number
}

const hasFunctionResponse = (body: Json): boolean =>
  ((body.contents ?? []) as Json[]).some((c) => ((c.parts ?? []) as Json[]).some((p) => p.functionResponse !== undefined))

const declared = (body: Json): Json[] =>
  ((body.tools ?? []) as Json[]).flatMap((t) => ((t.functionDeclarations ?? []) as Json[]))

const text = (s: string): Json[] => [{ text: s }]

/** functionCall for `list_directory` with whatever its first required argument is called. */
const listDirCall = (extra: Json = {}) => (body: Json): Json[] => {
  const decl = declared(body).find((d) => d.name === "list_directory")
  const schema = (decl?.parametersJsonSchema ?? decl?.parameters ?? {}) as Json
  const required = (schema.required ?? ["dir_path"]) as string[]
  const args: Json = {}
  for (const name of required) args[name] = "."
  return [{ functionCall: { name: "list_directory", args }, ...extra }]
}

const toolRoundTrip = (extra: Json = {}) => (body: Json, _turn: number): Json[] =>
  hasFunctionResponse(body) ? text("The directory lists a.txt and b.txt.") : listDirCall(extra)(body)

const google500 = { error: { code: 500, message: "capture: injected failure", status: "INTERNAL" } }
const google429 = { error: { code: 429, message: "capture: injected rate limit", status: "RESOURCE_EXHAUSTED" } }

const scenarios: Record<string, Scenario> = {
  plain: { options: { model: "some-model", prompt: "Say hi" }, main: () => text("Hi from capture!") },
  auto: { options: { prompt: "Say hi" }, main: () => text("Hi from capture (auto)!") },
  "auto-pro": { options: { prompt: "Say hi" }, main: () => text("Hi (pro)"), choose: (_at, o) => o[o.length - 1], routerScore: 95 },
  "auto-flash-model": { options: { model: "gemini-2.5-flash", prompt: "Say hi" }, main: () => text("Hi") },
  "auto-25": { options: { model: "auto-gemini-2.5", prompt: "Say hi" }, main: () => text("Hi (auto 2.5)") },
  tool: {
    options: { model: "gemini-2.5-flash", prompt: "List the files here", files: { "a.txt": "A\n", "b.txt": "B\n" } },
    main: toolRoundTrip()
  },
  "tool-sig": {
    options: { model: "gemini-3-pro-preview", prompt: "List the files here", files: { "a.txt": "A\n", "b.txt": "B\n" } },
    main: toolRoundTrip({ thoughtSignature: "c2lnLWZyb20tY2FwdHVyZQ==" })
  },
  "tool-thought": {
    options: { model: "gemini-3-flash-preview", prompt: "List the files here", files: { "a.txt": "A\n" } },
    main: (body) =>
      hasFunctionResponse(body)
        ? [{ text: "Thinking about the listing.", thought: true }, { text: "One file: a.txt." }]
        : [{ text: "I should list the directory.", thought: true, thoughtSignature: "dGhvdWdodC1zaWc=" }, ...listDirCall()(body)]
  },
  "tool-id": {
    options: { model: "gemini-2.5-flash", prompt: "List the files here", files: { "a.txt": "A\n", "b.txt": "B\n" } },
    main: (body) =>
      hasFunctionResponse(body)
        ? text("Done.")
        : listDirCall()(body).map((p) => ({ ...p, functionCall: { ...(p.functionCall as Json), id: "call-from-capture-1" } }))
  },
  "tool-auto": {
    options: { prompt: "List the files here", files: { "a.txt": "A\n", "b.txt": "B\n" } },
    main: toolRoundTrip()
  },
  "tool-yolo": {
    options: { model: "gemini-2.5-flash", approvalMode: "yolo", prompt: "List the files here", files: { "a.txt": "A\n" } },
    main: toolRoundTrip()
  },
  websearch: {
    options: { model: "gemini-2.5-flash", prompt: "Search the web for capture servers" },
    main: (body) =>
      hasFunctionResponse(body) ? text("Found it.") : [{ functionCall: { name: "google_web_search", args: { query: "capture servers" } } }]
  },
  "shell-yolo": {
    options: { model: "gemini-2.5-flash", approvalMode: "yolo", prompt: "Run echo" },
    main: (body) =>
      hasFunctionResponse(body)
        ? text("Ran it.")
        : [{ functionCall: { name: "run_shell_command", args: { command: "echo hello-from-shell > out.txt && echo done" } } }]
  },
  media: {
    options: {
      model: "gemini-2.5-flash",
      prompt: "Describe @pic.png",
      files: {
        "pic.png": Buffer.from(
          "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
          "base64"
        ).toString("latin1")
      }
    },
    main: () => text("A tiny picture.")
  },
  "media-count404": {
    options: {
      model: "gemini-2.5-flash",
      prompt: "Describe @pic.png",
      settings: NO_RETRIES as unknown as Record<string, unknown>,
      files: { "pic.png": "\u0089PNG not really a png" }
    },
    main: () => text("A tiny picture."),
    fail: (_seq, action) =>
      action === "countTokens" ? { status: 404, body: { error: { code: 404, message: "capture: no countTokens", status: "NOT_FOUND" } } } : undefined
  },
  "auto-router500": {
    options: { prompt: "Say hi", timeoutMs: 100_000 },
    main: () => text("Hi despite the router"),
    fail: (_seq, action) => (action === "generateContent" ? { status: 500, body: google500 } : undefined)
  },
  "auto-router500-noretry": {
    options: { prompt: "Say hi", settings: NO_RETRIES as unknown as Record<string, unknown> },
    main: () => text("Hi despite the router"),
    fail: (_seq, action) => (action === "generateContent" ? { status: 500, body: google500 } : undefined)
  },
  "auto-router400": {
    options: { prompt: "Say hi" },
    main: () => text("Hi despite the router"),
    fail: (_seq, action) =>
      action === "generateContent" ? { status: 400, body: { error: { code: 400, message: "capture: no JSON mode", status: "INVALID_ARGUMENT" } } } : undefined
  },
  "err500-noretry": {
    options: { model: "gemini-2.5-flash", prompt: "Say hi", settings: NO_RETRIES as unknown as Record<string, unknown> },
    main: () => text("unreachable"),
    fail: () => ({ status: 500, body: google500 })
  },
  "err500-once": {
    options: { model: "gemini-2.5-flash", prompt: "Say hi" },
    main: () => text("Hi after a retry"),
    fail: (seq) => (seq === 1 ? { status: 500, body: google500 } : undefined)
  },
  "err429-default": {
    options: { model: "gemini-2.5-flash", prompt: "Say hi", timeoutMs: 120_000 },
    main: () => text("unreachable"),
    fail: () => ({ status: 429, body: google429 })
  },
  "err429-noretry": {
    options: { model: "gemini-2.5-flash", prompt: "Say hi", settings: NO_RETRIES as unknown as Record<string, unknown> },
    main: () => text("unreachable"),
    fail: () => ({ status: 429, body: google429 })
  },
  "err400": {
    options: { model: "gemini-2.5-flash", prompt: "Say hi" },
    main: () => text("unreachable"),
    fail: () => ({ status: 400, body: { error: { code: 400, message: "capture: bad request", status: "INVALID_ARGUMENT" } } })
  },
  text: {
    options: { model: "gemini-2.5-flash", prompt: "Say hi", outputFormat: "text" },
    main: () => text("Hi from capture (text)!")
  },
  "stream-json": {
    options: { model: "gemini-2.5-flash", prompt: "Say hi", outputFormat: "stream-json" },
    main: () => text("Hi from capture (stream-json)!")
  }
}

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

const readBody = (req: IncomingMessage): Promise<Buffer> =>
  new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resolve(Buffer.concat(chunks)))
    req.on("error", reject)
  })

const startServer = async (scenario: Scenario, started: () => number) => {
  const recorded: Recorded[] = []
  let mainTurn = 0
  const sockets = new Set<Socket>()
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const raw = await readBody(req)
    const url = new URL(req.url ?? "/", "http://x")
    let body: unknown = undefined
    if (raw.length > 0) {
      try {
        body = JSON.parse(raw.toString("utf8"))
      } catch {
        body = `<${raw.length} bytes, not JSON>`
      }
    }
    const rec: Recorded = {
      seq: recorded.length + 1,
      t: started(),
      method: req.method ?? "",
      path: url.pathname,
      query: Object.fromEntries(url.searchParams),
      headers: redactHeaders(req.headers),
      bodyBytes: raw.length,
      body
    }
    recorded.push(rec)
    const m = /^\/v1beta\/models\/([^/:]+):(\w+)$/.exec(url.pathname)
    const send = (status: number, payload: Json, answer: unknown = payload) => {
      rec.answer = { status, answer }
      res.writeHead(status, { "content-type": "application/json" })
      res.end(JSON.stringify(payload))
    }
    if (req.method !== "POST" || m === null) return send(404, { error: { code: 404, message: "capture: not found", status: "NOT_FOUND" } })
    const action = m[2]!
    const failure = scenario.fail?.(rec.seq, action)
    if (failure !== undefined) return send(failure.status, failure.body)
    if (action === "countTokens") return send(200, { totalTokens: 5 })
    if (action !== "generateContent" && action !== "streamGenerateContent") return send(404, { error: { code: 404, message: "capture: unknown method", status: "NOT_FOUND" } })
    const b = (body ?? {}) as Json
    const gen = (b.generationConfig ?? {}) as Json
    const schema = gen.responseJsonSchema ?? gen.responseSchema
    let parts: Json[]
    if (schema !== undefined) parts = text(JSON.stringify(sampleFromSchema(schema, scenario.choose ?? ((_p, o) => o[0]), "", scenario.routerScore ?? 10)))
    else if (declared(b).length > 0) parts = scenario.main(b, mainTurn++)
    else parts = text("ok")
    const payload = candidateResponse(parts)
    if (action === "generateContent") return send(200, payload)
    rec.answer = { status: 200, sse: payload }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
    res.end(`data: ${JSON.stringify(payload)}\r\n\r\n`)
  })
  server.on("connection", (s: Socket) => {
    sockets.add(s)
    s.on("close", () => sockets.delete(s))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    recorded,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      })
  }
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

const runScenario = async (name: string): Promise<void> => {
  const scenario = scenarios[name]
  if (scenario === undefined) throw new Error(`unknown scenario ${name}`)
  const outDir = path.join(here, "samples", name)
  fs.rmSync(outDir, { recursive: true, force: true })
  fs.mkdirSync(outDir, { recursive: true })
  const netlog = path.join(outDir, "netlog.jsonl")
  let t0 = Date.now()
  const server = await startServer(scenario, () => Date.now() - t0)
  t0 = Date.now()
  const run = await runGeminiCli({
    ...scenario.options,
    baseUrl: server.url,
    apiKey: KEY,
    env: { NODE_OPTIONS: `--require ${path.join(here, "netlog.cjs")}`, NETLOG_FILE: netlog, ...scenario.options.env }
  })
  try {
    const files = fs.readdirSync(run.workDir)
    await server.close()
    server.recorded.forEach((r) => fs.writeFileSync(path.join(outDir, `req-${r.seq}.json`), JSON.stringify(r, null, 2) + "\n"))
    const summary = {
      scenario: name,
      options: scenario.options,
      exitCode: run.exitCode,
      signal: run.signal,
      timedOut: run.timedOut,
      durationMs: run.durationMs,
      responseText: run.responseText,
      error: run.error,
      output: run.output,
      events: run.events,
      stdout: run.output === undefined && run.events.length === 0 ? run.stdout : undefined,
      stderr: run.stderr,
      workDirFiles: files,
      requests: server.recorded.map((r) => ({ seq: r.seq, t: r.t, method: r.method, path: r.path, query: r.query, bytes: r.bodyBytes }))
    }
    const redacted = JSON.stringify(summary, null, 2).split(KEY).join("<KEY>")
    fs.writeFileSync(path.join(outDir, "run.json"), redacted + "\n")
    console.log(
      `${name}: exit=${run.exitCode} timedOut=${run.timedOut} ${run.durationMs}ms requests=${server.recorded.length} ` +
        `answer=${JSON.stringify(run.responseText)} error=${JSON.stringify(run.error)}`
    )
    for (const r of server.recorded) console.log(`  #${r.seq} +${r.t}ms ${r.method} ${r.path}${Object.keys(r.query).length ? "?" + new URLSearchParams(r.query) : ""} ${r.bodyBytes}B -> ${JSON.stringify((r.answer as Json | undefined)?.status)}`)
  } finally {
    await run.dispose()
    await server.close().catch(() => undefined)
  }
  // every sample file: the key must not appear anywhere
  for (const f of fs.readdirSync(outDir)) {
    const content = fs.readFileSync(path.join(outDir, f), "utf8")
    if (content.includes(KEY)) throw new Error(`key leaked into ${f}`)
  }
  const leftovers = liveGeminiCliPids()
  if (leftovers.length > 0) console.log(`  LEFTOVER PIDS: ${leftovers.join(",")}`)
}

const names = process.argv.slice(2)
for (const name of names.length > 0 ? names : ["plain", "auto", "tool"]) await runScenario(name)
