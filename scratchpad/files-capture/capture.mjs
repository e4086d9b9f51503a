// Capture what the official SDKs send for their Files APIs.
// Usage: node scratchpad/files-capture/capture.mjs [openai|anthropic|gemini|all]
// Starts a node:http server on 127.0.0.1:<random>, points each SDK at it, logs
// every request (auth redacted) + the response we gave, writes samples/<sdk>.jsonl.
import http from "node:http"
import fs from "node:fs"
import path from "node:path"
import os from "node:os"
import { fileURLToPath } from "node:url"

const HERE = path.dirname(fileURLToPath(import.meta.url))
const SAMPLES = path.join(HERE, "samples")
fs.mkdirSync(SAMPLES, { recursive: true })

// ---------------------------------------------------------------- logging
let LOG = []
let TAG = ""                       // current scenario step, stamped on entries
const mode = {}                    // knobs flipped by scenarios (gemini experiments)
const REDACT = new Set(["authorization", "x-api-key", "x-goog-api-key", "api-key"])

const esc = (buf) => buf.toString("latin1").replace(/[^\x20-\x7e]/g, (c) =>
  c === "\r" ? "\\r" : c === "\n" ? "\\n\n" : "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0"))

function redactHeaders(h) {
  const out = {}
  for (const [k, v] of Object.entries(h)) {
    if (REDACT.has(k)) {
      const m = /^(\w+)\s+/.exec(v)
      out[k] = m && k === "authorization" ? `${m[1]} <redacted len=${v.length - m[0].length}>` : `<redacted len=${v.length}>`
    } else out[k] = v
  }
  return out
}

function describeBody(buf, ct) {
  if (!buf.length) return { len: 0 }
  const m = /multipart\/form-data;\s*boundary=("?)([^";]+)\1/i.exec(ct || "")
  if (m) {
    const boundary = m[2]
    const delim = Buffer.from("--" + boundary)
    const parts = []
    let idx = buf.indexOf(delim)
    const preamble = idx
    while (idx !== -1) {
      const after = idx + delim.length
      if (buf.slice(after, after + 2).toString() === "--") { // closing delimiter
        parts.push({ closing: true, trailer: esc(buf.slice(after)) })
        break
      }
      const next = buf.indexOf(delim, after)
      const raw = buf.slice(after, next === -1 ? buf.length : next) // "\r\n<headers>\r\n\r\n<data>\r\n"
      const hEnd = raw.indexOf("\r\n\r\n")
      const headerText = raw.slice(0, hEnd + 4)
      let data = raw.slice(hEnd + 4)
      const endsCRLF = data.slice(-2).toString() === "\r\n"
      if (endsCRLF) data = data.slice(0, -2)
      parts.push({ rawHeaders: esc(headerText), dataLen: data.length, first200: esc(data.slice(0, 200)), dataEndsWithCRLFbeforeDelim: endsCRLF })
      idx = next
    }
    return { len: buf.length, multipart: { boundary, preambleBytes: preamble, first80raw: esc(buf.slice(0, 80)), parts } }
  }
  if (/json/.test(ct || "") || buf[0] === 0x7b) {
    try { return { len: buf.length, json: JSON.parse(buf.toString("utf8")) } } catch {}
  }
  return { len: buf.length, first64: esc(buf.slice(0, 64)) }
}

// ---------------------------------------------------------------- fake state
let PORT = 0
const now = Math.floor(Date.now() / 1000)
const iso = (s) => new Date(s * 1000).toISOString()
const openaiFiles = new Map()
const anthFiles = new Map()
const gemFiles = new Map()
const gemUploads = new Map()
let seq = 0
const nid = () => (++seq).toString(36).padStart(4, "0")

function send(res, status, headers, body, entry) {
  const h = { ...headers }
  let payload = body
  if (body !== undefined && !Buffer.isBuffer(body) && typeof body !== "string") {
    payload = JSON.stringify(body); h["content-type"] ??= "application/json"
  }
  entry.response = { status, headers: h, body: Buffer.isBuffer(body) ? `<${body.length} bytes>` : body }
  res.writeHead(status, h); res.end(payload)
}

// seed a few extra files so list pagination has >1 page
for (let i = 0; i < 4; i++) {
  const o = { id: `file-seed${i}`, object: "file", bytes: 10 + i, created_at: now - 100 + i, expires_at: null, filename: `seed${i}.txt`, purpose: "user_data", status: "processed", status_details: null }
  openaiFiles.set(o.id, o)
  const a = { id: `file_seed${i}`, type: "file", filename: `seed${i}.txt`, mime_type: "text/plain", size_bytes: 10 + i, created_at: iso(now - 100 + i), downloadable: true }
  anthFiles.set(a.id, a)
  const g = gemFile(`seed${i}`, `seed${i}.txt`, "text/plain", 10 + i)
  gemFiles.set(g.name, g)
}
function gemFile(id, displayName, mimeType, size) {
  return { name: `files/${id}`, displayName, mimeType, sizeBytes: String(size), createTime: iso(now), updateTime: iso(now),
    expirationTime: iso(now + 48 * 3600), sha256Hash: "ZmFrZQ==", uri: `https://generativelanguage.googleapis.com/v1beta/files/${id}`, state: "ACTIVE", source: "UPLOADED" }
}

// ---------------------------------------------------------------- routes
function route(req, url, body, res, entry) {
  const p = url.pathname, q = url.searchParams, M = req.method
  let m
  // ---- OpenAI: base http://127.0.0.1:P/openai/v1
  if (p === "/openai/v1/files" && M === "POST") {
    const parts = entry.body.multipart?.parts ?? []
    const fn = /filename="([^"]*)"/.exec(parts.map((x) => x.rawHeaders).join(""))?.[1] ?? "?"
    const fileLen = parts.find((x) => /filename=/.test(x.rawHeaders ?? ""))?.dataLen ?? 0
    const purpose = /name="purpose"/.test(parts.map((x) => x.rawHeaders).join("")) ? parts.find((x) => /name="purpose"/.test(x.rawHeaders)).first200 : "?"
    const o = { id: `file-${nid()}`, object: "file", bytes: fileLen, created_at: now, expires_at: null, filename: fn, purpose, status: "processed", status_details: null }
    openaiFiles.set(o.id, o); return send(res, 200, {}, o, entry)
  }
  if (p === "/openai/v1/files" && M === "GET") {
    let all = [...openaiFiles.values()].sort((a, b) => b.created_at - a.created_at || (a.id < b.id ? 1 : -1))
    if (q.get("purpose")) all = all.filter((f) => f.purpose === q.get("purpose"))
    const after = q.get("after"); if (after) all = all.slice(all.findIndex((f) => f.id === after) + 1)
    const lim = Number(q.get("limit") ?? 10000); const data = all.slice(0, lim)
    return send(res, 200, {}, { object: "list", data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: all.length > lim }, entry)
  }
  if ((m = /^\/openai\/v1\/files\/([^/]+)\/content$/.exec(p)) && M === "GET")
    return send(res, 200, { "content-type": "application/octet-stream" }, Buffer.from("hello from openai content\n"), entry)
  if ((m = /^\/openai\/v1\/files\/([^/]+)$/.exec(p))) {
    const f = openaiFiles.get(decodeURIComponent(m[1]))
    if (!f) return send(res, 404, {}, { error: { message: "No such File object", type: "invalid_request_error", param: "id", code: null } }, entry)
    if (M === "GET") return send(res, 200, {}, f, entry)
    if (M === "DELETE") { openaiFiles.delete(f.id); return send(res, 200, {}, { id: f.id, object: "file", deleted: true }, entry) }
  }
  // ---- Anthropic: base http://127.0.0.1:P/anthropic
  if (p === "/anthropic/v1/files" && M === "POST") {
    const parts = entry.body.multipart?.parts ?? []
    const fp = parts.find((x) => /filename=/.test(x.rawHeaders ?? "")) ?? {}
    const a = { id: `file_${nid()}`, type: "file", filename: /filename="([^"]*)"/.exec(fp.rawHeaders ?? "")?.[1] ?? "unnamed",
      mime_type: /Content-Type: ([^\\]+)/i.exec(fp.rawHeaders ?? "")?.[1] ?? "application/octet-stream", size_bytes: fp.dataLen ?? 0, created_at: iso(now), downloadable: false }
    anthFiles.set(a.id, a); return send(res, 200, {}, a, entry)
  }
  if (p === "/anthropic/v1/files" && M === "GET") {
    const all = [...anthFiles.values()]
    const start = q.get("page") ? Number(q.get("page").replace("page_", "")) : 0
    const lim = Number(q.get("limit") ?? 20)
    const data = all.slice(start, start + lim)
    const next = start + lim < all.length ? `page_${start + lim}` : null
    const body = mode.anthLegacyList
      ? { data, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null, has_more: next !== null }
      : { data, next_page: next }
    return send(res, 200, {}, body, entry)
  }
  if ((m = /^\/anthropic\/v1\/files\/([^/]+)\/content$/.exec(p)) && M === "GET")
    return send(res, 200, { "content-type": "application/pdf" }, Buffer.from("%PDF-1.4 fake\n"), entry)
  if ((m = /^\/anthropic\/v1\/files\/([^/]+)$/.exec(p))) {
    const f = anthFiles.get(decodeURIComponent(m[1]))
    if (!f) return send(res, 404, {}, { type: "error", error: { type: "not_found_error", message: "File not found" } }, entry)
    if (M === "GET") return send(res, 200, {}, f, entry)
    if (M === "DELETE") { anthFiles.delete(f.id); return send(res, 200, {}, { id: f.id, type: "file_deleted" }, entry) }
  }
  if (p === "/anthropic/v1/messages" && M === "POST")
    return send(res, 200, {}, { id: "msg_1", type: "message", role: "assistant", model: entry.body.json?.model, content: [{ type: "text", text: "ok" }],
      stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 1, output_tokens: 1 } }, entry)
  // ---- Gemini: base http://127.0.0.1:P/gemini
  if ((p === "/gemini/upload/v1beta/files" || p === "/upload/v1beta/files") && M === "POST" && !q.get("upload_id")) {
    const j = entry.body.json ?? {}
    const id = "up" + nid()
    gemUploads.set(id, { size: Number(req.headers["x-goog-upload-header-content-length"]), mime: req.headers["x-goog-upload-header-content-type"],
      displayName: j.file?.displayName, name: j.file?.name, received: 0 })
    let upUrl = `http://127.0.0.1:${PORT}/gemini/upload/v1beta/files?upload_id=${id}&upload_protocol=resumable`
    if (mode.gUploadUrl === "foreignHost") upUrl = `https://upload.example.invalid:4443/gemini/upload/v1beta/files?upload_id=${id}&upload_protocol=resumable`
    if (mode.gUploadUrl === "relative") upUrl = `/gemini/upload/v1beta/files?upload_id=${id}&upload_protocol=resumable`
    if (mode.gUploadUrl === "noPrefix") upUrl = `http://127.0.0.1:${PORT}/upload/v1beta/files?upload_id=${id}&upload_protocol=resumable`
    // minimal: only x-goog-upload-url (SDK checks nothing else on the start response)
    const h = { "x-goog-upload-url": upUrl }
    if (mode.gStartFull) Object.assign(h, { "x-goog-upload-status": "active", "x-goog-upload-control-url": upUrl, "x-goog-upload-chunk-granularity": "8388608" })
    return send(res, 200, h, "", entry)
  }
  if ((p === "/gemini/upload/v1beta/files" || p === "/upload/v1beta/files") && M === "POST" && q.get("upload_id")) {
    const u = gemUploads.get(q.get("upload_id"))
    if (!u) return send(res, 404, {}, { error: { code: 404, message: "no upload", status: "NOT_FOUND" } }, entry)
    const cmd = req.headers["x-goog-upload-command"] ?? ""
    const off = Number(req.headers["x-goog-upload-offset"])
    entry.check = { offsetMatches: off === u.received, chunkLen: body.length }
    u.received += body.length
    if (/finalize/.test(cmd)) {
      const id = (u.name ?? "").replace(/^files\//, "") || "g" + nid()
      const f = gemFile(id, u.displayName, u.mime, u.received)
      gemFiles.set(f.name, f)
      const status = mode.gFinalStatus ?? "final"
      const h = status ? { "x-goog-upload-status": status } : {}
      return send(res, 200, h, mode.gFinalBare ? f : { file: f }, entry)
    }
    if (mode.gChunkNoStatus) return send(res, 200, {}, "", entry)
    return send(res, 200, { "x-goog-upload-status": "active" }, "", entry)
  }
  if (p === "/gemini/v1beta/files" && M === "GET") {
    const all = [...gemFiles.values()]
    const tok = q.get("pageToken")
    const start = tok ? Number(tok.replace("tok", "")) : 0
    const lim = Number(q.get("pageSize") ?? 10)
    const files = all.slice(start, start + lim)
    const bodyObj = { files }
    if (start + lim < all.length) bodyObj.nextPageToken = `tok${start + lim}`
    else if (mode.gEmptyTokenOnLast) bodyObj.nextPageToken = ""
    return send(res, 200, {}, bodyObj, entry)
  }
  if ((m = /^\/gemini\/v1beta\/files\/([^/:]+):download$/.exec(p)) && M === "GET")
    return send(res, 200, { "content-type": "text/plain" }, Buffer.from("hello from gemini download\n"), entry)
  if ((m = /^\/gemini\/v1beta\/files\/([^/:]+)$/.exec(p))) {
    const f = gemFiles.get(`files/${m[1]}`)
    if (!f) return send(res, 404, {}, { error: { code: 404, message: `File files/${m[1]} not found.`, status: "NOT_FOUND" } }, entry)
    if (M === "GET") return send(res, 200, {}, f, entry)
    if (M === "DELETE") { gemFiles.delete(f.name); if (mode.gDeleteEmpty) return send(res, mode.gDeleteEmpty, {}, "", entry); return send(res, 200, {}, {}, entry) }
  }
  return send(res, 404, {}, { error: { message: `capture: no route ${M} ${p}` } }, entry)
}

const server = http.createServer((req, res) => {
  const chunks = []
  req.on("data", (c) => chunks.push(c))
  req.on("end", () => {
    const body = Buffer.concat(chunks)
    const url = new URL(req.url, "http://x")
    const entry = { step: TAG, method: req.method, url: req.url, httpVersion: req.httpVersion, rawHeaderOrder: req.rawHeaders.filter((_, i) => i % 2 === 0),
      headers: redactHeaders(req.headers), body: describeBody(body, req.headers["content-type"]) }
    LOG.push(entry)
    try { route(req, url, body, res, entry) } catch (e) { send(res, 500, {}, { error: String(e) }, entry) }
  })
})
await new Promise((r) => server.listen(0, "127.0.0.1", r))
PORT = server.address().port
const BASE = `http://127.0.0.1:${PORT}`
console.error(`capture server on ${BASE} (pid ${process.pid})`)

// ---------------------------------------------------------------- scenarios
const results = {}
async function step(name, fn) {
  TAG = name
  try { const r = await fn(); results[name] = { ok: true, result: r } }
  catch (e) { results[name] = { ok: false, error: `${e?.constructor?.name}: ${e?.message}`, status: e?.status } }
  TAG = ""
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "files-capture-"))
const small = path.join(tmp, "a.txt"); fs.writeFileSync(small, "hello world\nline2\n")
const big = path.join(tmp, "big.bin"); fs.writeFileSync(big, Buffer.alloc(8 * 1024 * 1024 * 2 + 12345, 0x61)) // 16 MiB + 12345 -> 3 chunks

async function runOpenAI() {
  const { default: OpenAI, toFile } = await import("openai")
  const client = new OpenAI({ apiKey: "sk-test-123", baseURL: `${BASE}/openai/v1`, maxRetries: 0 })
  let id1, id2
  await step("openai.create.readStream", async () => { const f = await client.files.create({ file: fs.createReadStream(small), purpose: "user_data" }); id1 = f.id; return f })
  await step("openai.create.toFile", async () => { const f = await client.files.create({ file: await toFile(Buffer.from("buffer body\n"), "a.txt"), purpose: "user_data" }); id2 = f.id; return f })
  await step("openai.create.toFile+expires_after", async () => client.files.create({ file: await toFile(Buffer.from("{}\n"), "b.jsonl", { type: "application/jsonl" }), purpose: "batch", expires_after: { anchor: "created_at", seconds: 3600 } }))
  await step("openai.list.iterate", async () => { const ids = []; for await (const f of client.files.list({ purpose: "user_data", limit: 2 })) ids.push(f.id); return ids })
  await step("openai.list.pageApi", async () => { const pg = await client.files.list({ limit: 3 }); return { has_more: pg.has_more, next: pg.hasNextPage(), n: pg.data.length } })
  await step("openai.retrieve", async () => client.files.retrieve(id1))
  await step("openai.content", async () => { const r = await client.files.content(id1); return { isResponse: r instanceof Response, status: r.status, ct: r.headers.get("content-type"), text: await r.text() } })
  await step("openai.delete", async () => client.files.delete(id2))
  await step("openai.retrieve.404", async () => client.files.retrieve("file-missing"))
}

async function runAnthropic() {
  const { default: Anthropic, toFile } = await import("@anthropic-ai/sdk")
  const client = new Anthropic({ apiKey: "sk-ant-test-123", baseURL: `${BASE}/anthropic`, maxRetries: 0 })
  let id1
  await step("anthropic.beta.upload", async () => { const f = await client.beta.files.upload({ file: await toFile(Buffer.from("%PDF-1.4\n%fake pdf\n"), "a.pdf", { type: "application/pdf" }) }); id1 = f.id; return f })
  await step("anthropic.beta.upload+betas+expires", async () => client.beta.files.upload({ file: await toFile(Buffer.from("plain\n"), "b.txt", { type: "text/plain" }), expires_in_seconds: 3600, betas: ["files-api-2025-04-14"] }))
  await step("anthropic.beta.upload.readStream", async () => client.beta.files.upload({ file: fs.createReadStream(small) }))
  await step("anthropic.beta.upload.readStream+expires(part order)", async () => client.beta.files.upload({ file: fs.createReadStream(small), expires_in_seconds: 7200 }))
  await step("anthropic.beta.list.iterate", async () => { const ids = []; for await (const f of client.beta.files.list({ limit: 2 })) ids.push(f.id); return ids })
  await step("anthropic.beta.list.ids+scope+workspace", async () => { const pg = await client.beta.files.list({ ids: ["file_seed0", "file_seed1"], scope_id: "sesn_1", workspace_id: "wrkspc_1" }); return pg.data.map((f) => f.id) })
  mode.anthLegacyList = true
  await step("anthropic.beta.list.iterate.legacyShapeResponse", async () => { const ids = []; for await (const f of client.beta.files.list({ limit: 2 })) ids.push(f.id); return ids })
  mode.anthLegacyList = false
  await step("anthropic.beta.retrieveMetadata", async () => client.beta.files.retrieveMetadata(id1))
  await step("anthropic.beta.download", async () => { const r = await client.beta.files.download(id1); return { isResponse: r instanceof Response, ct: r.headers.get("content-type"), text: await r.text() } })
  await step("anthropic.beta.delete", async () => client.beta.files.delete(id1))
  await step("anthropic.ga.upload", async () => client.files.upload({ file: await toFile(Buffer.from("ga\n"), "c.txt", { type: "text/plain" }) }))
  await step("anthropic.ga.list", async () => { const pg = await client.files.list({ limit: 1 }); return { n: pg.data.length, next_page: pg.next_page } })
  await step("anthropic.beta.messages.fileRef", async () => client.beta.messages.create({ model: "claude-sonnet-4-5", max_tokens: 16, betas: ["files-api-2025-04-14"],
    messages: [{ role: "user", content: [{ type: "document", source: { type: "file", file_id: "file_seed0" } }, { type: "text", text: "summarize" }] }] }))
  await step("anthropic.messages.fileRef", async () => client.messages.create({ model: "claude-sonnet-4-5", max_tokens: 16,
    messages: [{ role: "user", content: [{ type: "document", source: { type: "file", file_id: "file_seed0" } }, { type: "image", source: { type: "file", file_id: "file_seed1" } }] }] }))
}

async function runGemini() {
  const { GoogleGenAI } = await import("@google/genai")
  const ai = new GoogleGenAI({ apiKey: "AIza-test-123", httpOptions: { baseUrl: `${BASE}/gemini` } })
  const reset = () => { for (const k of Object.keys(mode)) delete mode[k] }
  await step("gemini.upload.blob", async () => ai.files.upload({ file: new Blob(["hello blob\n"], { type: "text/plain" }), config: { mimeType: "text/plain", displayName: "blob.txt" } }))
  await step("gemini.upload.path.small+name", async () => ai.files.upload({ file: small, config: { displayName: "A txt", name: "myfile1" } }))
  await step("gemini.upload.path.big(3 chunks)", async () => ai.files.upload({ file: big, config: { mimeType: "application/octet-stream" } }))
  await step("gemini.upload.blob.big(3 chunks)", async () => ai.files.upload({ file: new Blob([fs.readFileSync(big)], { type: "application/octet-stream" }) }))
  mode.gStartFull = true
  await step("gemini.upload.startFullHeaders", async () => ai.files.upload({ file: new Blob(["x"], { type: "text/plain" }) }))
  reset(); mode.gUploadUrl = "foreignHost"
  await step("gemini.exp.uploadUrlForeignHost", async () => ai.files.upload({ file: new Blob(["x"], { type: "text/plain" }) }))
  reset(); mode.gUploadUrl = "relative"
  await step("gemini.exp.uploadUrlRelative", async () => ai.files.upload({ file: new Blob(["x"], { type: "text/plain" }) }))
  reset(); mode.gUploadUrl = "noPrefix"
  await step("gemini.exp.uploadUrlNoBasePathPrefix", async () => ai.files.upload({ file: new Blob(["x"], { type: "text/plain" }) }))
  reset(); mode.gFinalStatus = "active"
  await step("gemini.exp.finalChunkSaysActive", async () => ai.files.upload({ file: new Blob(["x"], { type: "text/plain" }) }))
  reset(); mode.gFinalStatus = ""
  await step("gemini.exp.finalChunkNoStatus(retries)", async () => ai.files.upload({ file: new Blob(["x"], { type: "text/plain" }) }))
  reset(); mode.gFinalBare = true
  await step("gemini.exp.finalBodyNotWrapped", async () => ({ returned: await ai.files.upload({ file: new Blob(["x"], { type: "text/plain" }) }) ?? "undefined" }))
  reset(); mode.gChunkNoStatus = true
  await step("gemini.exp.intermediateChunkNoStatus", async () => ai.files.upload({ file: new Blob([Buffer.alloc(8 * 1024 * 1024 + 1, 0x62)], { type: "application/octet-stream" }) }))
  reset()
  await step("gemini.exp.zeroByteBlob", async () => ai.files.upload({ file: new Blob([], { type: "text/plain" }) }))
  await step("gemini.exp.configHttpOptionsDropsResumableHeaders", async () => ai.files.upload({ file: new Blob(["x"], { type: "text/plain" }), config: { httpOptions: { headers: { "x-extra": "1" } } } }))
  await step("gemini.exp.noMimeType", async () => ai.files.upload({ file: new Blob(["x"]) }))
  await step("gemini.get", async () => ai.files.get({ name: "files/myfile1" }))
  await step("gemini.get.byUri", async () => ai.files.get({ name: "https://generativelanguage.googleapis.com/v1beta/files/seed0" }))
  await step("gemini.list.iterate", async () => { const names = []; for await (const f of await ai.files.list({ config: { pageSize: 3 } })) names.push(f.name); return names })
  await step("gemini.list.noConfig", async () => { const pg = await ai.files.list(); return { n: pg.page.length, hasNext: pg.hasNextPage() } })
  mode.gEmptyTokenOnLast = true
  await step("gemini.exp.list.emptyNextPageTokenOnLastPage", async () => { const names = []; for await (const f of await ai.files.list({ config: { pageSize: 100 } })) { names.push(f.name); if (names.length > 40) return { loopedPast: names.length } } return names })
  reset()
  await step("gemini.download", async () => { const out = path.join(tmp, "dl.txt"); await ai.files.download({ file: "files/myfile1", downloadPath: out }); return fs.readFileSync(out, "utf8") })
  await step("gemini.delete", async () => ai.files.delete({ name: "files/myfile1" }))
  mode.gDeleteEmpty = 200
  await step("gemini.exp.delete.emptyBody200", async () => ai.files.delete({ name: "files/seed3" }))
  mode.gDeleteEmpty = 204
  await step("gemini.exp.delete.204", async () => ai.files.delete({ name: "files/seed2" }))
  reset()
  await step("gemini.get.404", async () => ai.files.get({ name: "files/myfile1" }))
}

const which = process.argv[2] ?? "all"
const runs = { openai: runOpenAI, anthropic: runAnthropic, gemini: runGemini }
for (const [name, fn] of Object.entries(runs)) {
  if (which !== "all" && which !== name) continue
  LOG = []
  await fn()
  fs.writeFileSync(path.join(SAMPLES, `${name}.jsonl`), LOG.map((e) => JSON.stringify(e)).join("\n") + "\n")
  const mine = Object.fromEntries(Object.entries(results).filter(([k]) => k.startsWith(name)))
  fs.writeFileSync(path.join(SAMPLES, `${name}.results.json`), JSON.stringify(mine, null, 1) + "\n")
  console.error(`${name}: ${LOG.length} requests captured`)
}
fs.rmSync(tmp, { recursive: true, force: true })
await new Promise((r) => server.close(r))
console.error("server closed")
