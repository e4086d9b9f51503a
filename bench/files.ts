/**
 * The files scenario of `npm run bench` (see bench/README.md):
 *
 * (a) throughput: one 32 MiB file sent to `POST /v1/files` (multipart) against the same request
 *     body sent to a bare `node:http` server that collects it and writes it with
 *     `fs.promises.writeFile`. Both servers are child processes (the client runs here), rounds
 *     interleaved, medians taken. Target: gateway >= 0.5x bare.
 * (b) memory: 8 uploads of 32 MiB at once, to 8 different apps, while the gateway child's RSS
 *     (VmRSS from /proc/<pid>/status) is sampled every 20 ms. Target: rise under 64 MiB.
 *     Different apps because an app's saves run one at a time with at most 64 MiB held by its
 *     running and waiting saves: one app would take one 32 MiB upload and queue one more, and
 *     answer the other six 429 `file_saves_busy` at once, so nothing would run concurrently.
 */
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as fs from "node:fs"
import * as http from "node:http"
import * as os from "node:os"
import * as path from "node:path"
import { median, startGateway } from "./lib.js"

const MiB = 1024 * 1024
const FILE_BYTES = 32 * MiB
const CONCURRENT = 8
const APPS = Array.from({ length: CONCURRENT }, (_, i) => `bench${i}`)
const keyOf = (app: string) => `sk-bench-${app}-0123456789`

type Note = (scenario: string, measure: string, value: number, unit: string) => void

const config = (dataDir: string) => `
listen: { host: 127.0.0.1, port: 0 }
dataDir: ${JSON.stringify(dataDir)}
accessLog: false
providers:
  mock: { type: mock }
# a 32 MiB file plus its multipart framing is a little over the default 32 MiB body cap
limits: { maxBodyBytes: ${33 * MiB} }
keys:
${APPS.map((app) => `  - { key: ${keyOf(app)}, app: ${app} }`).join("\n")}
`

/** A multipart/form-data body holding `data` as a PNG file, as the openai SDK builds it. */
const formBody = (data: Buffer) => {
  const boundary = `----formdata-bench-${randomBytes(8).toString("hex")}`
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="bench.png"\r\nContent-Type: image/png\r\n\r\n`
  )
  return { contentType: `multipart/form-data; boundary=${boundary}`, body: Buffer.concat([head, data, Buffer.from(`\r\n--${boundary}--\r\n`)]) }
}

/** POST a body; resolves with the status, the answer text and the ms to the end of the answer. */
const send = (url: string, headers: Record<string, string>, body: Buffer): Promise<{ status: number; text: string; ms: number }> =>
  new Promise((resolve, reject) => {
    const started = performance.now()
    const target = new URL(url)
    const req = http.request(
      { host: target.hostname, port: target.port, path: `${target.pathname}${target.search}`, method: "POST", headers: { ...headers, "content-length": String(body.length) }, agent: false },
      (res) => {
        const chunks: Array<Buffer> = []
        res.on("data", (c: Buffer) => chunks.push(c))
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8"), ms: performance.now() - started }))
        res.on("error", reject)
      }
    )
    req.on("error", reject)
    req.end(body)
  })

const call = async (url: string, method: string, headers: Record<string, string>) => {
  const res = await fetch(url, { method, headers })
  const text = await res.text()
  if (!res.ok) throw new Error(`${method} ${url}: ${res.status} ${text.slice(0, 200)}`)
  return text
}

/** The bare contender: collect the body, `fs.promises.writeFile` it, answer a small JSON. */
const bareScript = `
const http = require("node:http"), fs = require("node:fs"), path = require("node:path")
const target = path.join(process.argv[1], "upload.bin")
const server = http.createServer((req, res) => {
  const chunks = []
  req.on("data", (c) => chunks.push(c))
  req.on("end", () => {
    const body = Buffer.concat(chunks)
    fs.promises.writeFile(target, body).then(
      () => { res.writeHead(200, { "content-type": "application/json" }); res.end(JSON.stringify({ bytes: body.length })) },
      () => { res.writeHead(500); res.end() }
    )
  })
})
server.listen(0, "127.0.0.1", () => process.stdout.write("listening on http://127.0.0.1:" + server.address().port + "\\n"))
`

const startBare = async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-bench-bare-"))
  const child = spawn(process.execPath, ["-e", bareScript, dir], { stdio: ["ignore", "pipe", "inherit"] })
  const url = await new Promise<string>((resolve, reject) => {
    let out = ""
    child.stdout?.on("data", (d: Buffer) => {
      out += d.toString()
      const m = /listening on (http:\/\/\S+)/.exec(out)
      if (m) resolve(m[1])
    })
    child.once("exit", (code) => reject(new Error(`bare server exited with ${code}`)))
  })
  const stop = async () => {
    if (child.exitCode === null) {
      child.kill("SIGTERM")
      await new Promise<void>((r) => child.once("exit", () => r()))
    }
    fs.rmSync(dir, { recursive: true, force: true })
  }
  return { url, stop }
}

/** VmRSS of a process in bytes, or undefined where /proc is not there. */
const rssOf = (pid: number): number | undefined => {
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, "utf8"))
    return m === null ? undefined : Number(m[1]) * 1024
  } catch {
    return undefined
  }
}

/** RSS samples of a process every 20 ms while `work` runs: the idle level before it and the peak. */
const sampleRss = async <A>(pid: number, work: () => Promise<A>) => {
  const idle: Array<number> = []
  for (let i = 0; i < 5; i++) {
    idle.push(rssOf(pid) ?? 0)
    await new Promise((r) => setTimeout(r, 20))
  }
  const before = median(idle)
  let peak = before
  const sampler = setInterval(() => {
    const rss = rssOf(pid)
    if (rss !== undefined && rss > peak) peak = rss
  }, 20)
  try {
    const result = await work()
    peak = Math.max(peak, rssOf(pid) ?? 0)
    return { before, peak, rise: peak - before, result }
  } finally {
    clearInterval(sampler)
  }
}

const pngOf = (bytes: number) => {
  const d = randomBytes(bytes)
  d.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
  return d
}

export const filesScenario = async (options: { readonly rounds: number; readonly note: Note }) => {
  const { note, rounds } = options
  const measurable = rssOf(process.pid) !== undefined
  if (!measurable) process.stderr.write("[bench] files: /proc/<pid>/status is not readable here; RSS is not measured\n")

  /** A fresh gateway with the bench apps; `upload` sends one 32 MiB form, `remove` deletes it. */
  const withGateway = async <A>(run: (g: { pid: number; upload: (app: string, data: Buffer) => Promise<{ ms: number; id: string; bodyBytes: number }>; remove: (app: string, id: string) => Promise<string> }) => Promise<A>) => {
    const gateway = await startGateway(config)
    try {
      const upload = async (app: string, data: Buffer) => {
        const form = formBody(data)
        const res = await send(`${gateway.url}/v1/files`, { authorization: `Bearer ${keyOf(app)}`, "content-type": form.contentType }, form.body)
        if (res.status !== 200) throw new Error(`upload: ${res.status} ${res.text.slice(0, 200)}`)
        return { ms: res.ms, id: String((JSON.parse(res.text) as { id: string }).id), bodyBytes: form.body.length }
      }
      const remove = (app: string, id: string) => call(`${gateway.url}/v1/files/${id}`, "DELETE", { authorization: `Bearer ${keyOf(app)}` })
      return await run({ pid: gateway.child.pid!, upload, remove })
    } finally {
      await gateway.stop()
    }
  }
  const small = pngOf(64 * 1024)
  const data = pngOf(FILE_BYTES)

  // --- (a) one 32 MiB upload: the gateway against a bare node:http server + writeFile ----------
  const bare = await startBare()
  try {
    await withGateway(async ({ pid, remove, upload }) => {
      await remove(APPS[0], (await upload(APPS[0], small)).id)
      // the first 32 MiB upload into a fresh process: its RSS rise (for the record)
      const first = await sampleRss(pid, () => upload(APPS[0], data))
      await remove(APPS[0], first.result.id)
      const warm = formBody(data)
      await send(bare.url, { "content-type": warm.contentType }, warm.body)
      const gatewayRates: Array<number> = []
      const bareRates: Array<number> = []
      for (let i = 0; i < Math.max(3, rounds * 3); i++) {
        const done = await upload(APPS[0], data)
        gatewayRates.push(done.bodyBytes / MiB / (done.ms / 1000))
        await remove(APPS[0], done.id)
        const form = formBody(data)
        const res = await send(bare.url, { "content-type": form.contentType }, form.body)
        if (res.status !== 200) throw new Error(`bare: ${res.status}`)
        bareRates.push(form.body.length / MiB / (res.ms / 1000))
      }
      const gatewayRate = median(gatewayRates)
      const bareRate = median(bareRates)
      note("files 32 MiB upload", "gateway POST /v1/files (multipart, fsync, row)", gatewayRate, "MiB/s")
      note("files 32 MiB upload", "bare node:http + fs.promises.writeFile", bareRate, "MiB/s")
      note("files 32 MiB upload", "gateway / bare (target >= 0.5)", gatewayRate / bareRate, "x")
      if (measurable) note("files 32 MiB upload", "gateway RSS rise, first 32 MiB upload into a fresh process", first.rise / MiB, "MiB")
    })
  } finally {
    await bare.stop()
  }

  // --- (b) 8 uploads of 32 MiB at once, one per app, each round in a fresh gateway process ------
  if (!measurable) return
  const bodies = APPS.map(() => pngOf(FILE_BYTES))
  const rises: Array<number> = []
  const walls: Array<number> = []
  const idles: Array<number> = []
  for (let round = 0; round < rounds; round++) {
    await withGateway(async ({ pid, remove, upload }) => {
      // warm the code paths with one small upload per app, then let the process settle
      for (const app of APPS) await remove(app, (await upload(app, small)).id)
      await new Promise((r) => setTimeout(r, 300))
      const sampled = await sampleRss(pid, async () => {
        const started = performance.now()
        await Promise.all(APPS.map((app, i) => upload(app, bodies[i])))
        walls.push(performance.now() - started)
      })
      rises.push(sampled.rise / MiB)
      idles.push(sampled.before / MiB)
    })
  }
  note("files 8 x 32 MiB at once", "gateway RSS before (fresh process, warmed)", median(idles), "MiB")
  note("files 8 x 32 MiB at once", "gateway RSS rise, median of rounds (target < 64)", median(rises), "MiB")
  note("files 8 x 32 MiB at once", "gateway RSS rise, worst round", Math.max(...rises), "MiB")
  note("files 8 x 32 MiB at once", "aggregate throughput (8 apps, 256 MiB)", (CONCURRENT * FILE_BYTES) / MiB / (median(walls) / 1000), "MiB/s")
}
