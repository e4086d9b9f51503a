/**
 * The peer gateway contestant: the Portkey gateway from npm, installed for the benchmark only into
 * bench/.peer/ (git-ignored) when it is not there yet, with its `@hono/node-server` pinned to
 * 1.13.8 (newer ones break its streaming) by a direct dependency plus an override. Its install
 * scripts are not run (the only one, `patch-package`, has no patches in the published package).
 *
 * Portkey's start script takes only `--port=N` and listens on every interface; a preload
 * (bench/.peer/loopback.mjs) makes it listen on 127.0.0.1 and print the port it got.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { repoRoot, startServer, type Server } from "./procs.js"

export const PEER_VERSION = "1.15.2"
export const HONO_NODE_SERVER = "1.13.8"
/** where the peer is installed: bench/.peer, or BENCH_PEER_DIR (to share one install between checkouts) */
const dir = process.env.BENCH_PEER_DIR ?? path.join(repoRoot, "bench/.peer")
const gatewayPackage = path.join(dir, "node_modules/@portkey-ai/gateway/package.json")

const manifest = {
  name: "bench-peer",
  private: true,
  description: "The peer gateway of npm run bench (bench/peer.ts); installed at bench time, git-ignored.",
  dependencies: { "@portkey-ai/gateway": PEER_VERSION, "@hono/node-server": HONO_NODE_SERVER },
  overrides: { "@hono/node-server": HONO_NODE_SERVER }
}

const loopback = `// written by bench/peer.ts: listen on loopback only, and say where
import net from "node:net"
const listen = net.Server.prototype.listen
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" && (args[1] === undefined || typeof args[1] === "function")) args[1] === undefined ? (args[1] = "127.0.0.1") : args.splice(1, 0, "127.0.0.1")
  else if (typeof args[0] === "object" && args[0] !== null && args[0].path === undefined && args[0].host === undefined) args[0] = { ...args[0], host: "127.0.0.1" }
  this.once("listening", () => { const a = this.address(); if (a && typeof a === "object") process.stdout.write("listening on http://127.0.0.1:" + a.port + "\\n") })
  return listen.apply(this, args)
}
`

const versionOf = (packageJson: string): string | undefined => {
  try {
    return (JSON.parse(fs.readFileSync(packageJson, "utf8")) as { version?: string }).version
  } catch {
    return undefined
  }
}

/** what is installed: the gateway's version and that of the @hono/node-server it resolves (its own nested copy first) */
const installed = () => {
  const gateway = versionOf(gatewayPackage)
  if (gateway === undefined) return undefined
  const nested = path.join(path.dirname(gatewayPackage), "node_modules/@hono/node-server/package.json")
  const hono = versionOf(fs.existsSync(nested) ? nested : path.join(dir, "node_modules/@hono/node-server/package.json"))
  return { gateway, hono }
}

/** Install when missing; resolves with a note on what happened, or rejects with why it could not. */
export const ensurePeer = async (log: (line: string) => void): Promise<string> => {
  if (current()) return ready()
  // one install at a time (another bench run may be installing): a lock file, stale after 5 minutes
  fs.mkdirSync(dir, { recursive: true })
  const lock = path.join(dir, ".install-lock")
  const deadline = Date.now() + 300_000
  for (;;) {
    try {
      fs.closeSync(fs.openSync(lock, "wx"))
      break
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e
      const age = Date.now() - (fs.statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now())
      if (age > 300_000) fs.rmSync(lock, { force: true })
      else if (Date.now() > deadline) throw new Error("another bench run has been installing the peer for 5 minutes")
      else await new Promise((r) => setTimeout(r, 500))
    }
  }
  try {
    return await install(log)
  } finally {
    fs.rmSync(lock, { force: true })
  }
}

const where = () => (path.relative(repoRoot, dir).startsWith("..") ? dir : path.relative(repoRoot, dir))
const current = () => {
  const have = installed()
  return have?.gateway === PEER_VERSION && have.hono === HONO_NODE_SERVER
}
/** write the preload unless it is there already (another bench run may be starting the peer with it) */
const writeLoopback = () => {
  const file = path.join(dir, "loopback.mjs")
  if (fs.existsSync(file) && fs.readFileSync(file, "utf8") === loopback) return
  fs.writeFileSync(`${file}.${process.pid}.tmp`, loopback)
  fs.renameSync(`${file}.${process.pid}.tmp`, file)
}
const ready = () => {
  writeLoopback()
  return `@portkey-ai/gateway ${PEER_VERSION} (@hono/node-server ${HONO_NODE_SERVER}) already in ${where()}`
}

const install = async (log: (line: string) => void): Promise<string> => {
  const have = installed()
  if (have?.gateway === PEER_VERSION && have.hono === HONO_NODE_SERVER) return ready()
  fs.writeFileSync(path.join(dir, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`)
  writeLoopback()
  log(`installing @portkey-ai/gateway ${PEER_VERSION} with @hono/node-server ${HONO_NODE_SERVER} into ${where()} (npm install, once)`)
  const npm = process.platform === "win32" ? "npm.cmd" : "npm"
  const started = Date.now()
  await new Promise<void>((resolve, reject) =>
    execFile(npm, ["install", "--prefix", dir, "--no-audit", "--no-fund", "--ignore-scripts", "--no-package-lock", "--loglevel", "error", "--fetch-retries", "1", "--fetch-timeout", "30000"], { cwd: dir, timeout: 180_000, maxBuffer: 16 * 1024 * 1024 }, (err, _stdout, stderr) =>
      err ? reject(new Error(`npm install failed: ${npmReason(stderr) || err.message.split("\n")[0]}`)) : resolve()
    )
  )
  const now = installed()
  if (now?.gateway !== PEER_VERSION || now.hono !== HONO_NODE_SERVER) throw new Error(`after npm install: @portkey-ai/gateway ${now?.gateway ?? "missing"}, @hono/node-server ${now?.hono ?? "missing"} (wanted ${PEER_VERSION} / ${HONO_NODE_SERVER})`)
  return `installed @portkey-ai/gateway ${PEER_VERSION} (@hono/node-server ${HONO_NODE_SERVER}) into ${where()} in ${((Date.now() - started) / 1000).toFixed(1)} s`
}

/** the telling lines of npm's error output (its code and the failed request), not the whole log */
const npmReason = (stderr: string) =>
  stderr
    .split("\n")
    .filter((l) => /npm error (code|errno|network|request to|404|E[A-Z]+)/.test(l))
    .slice(0, 3)
    .map((l) => l.replace(/^npm error /, "").trim())
    .join("; ")

/** start Portkey on a free loopback port (headless: no UI, no log stream); `options`: more node arguments (preloads) and environment */
export const startPeer = (options: { readonly nodeArgs?: ReadonlyArray<string>; readonly env?: Readonly<Record<string, string>> } = {}): Promise<Server> =>
  startServer("portkey", process.execPath, [...(options.nodeArgs ?? []), "--import", path.join(dir, "loopback.mjs"), path.join(dir, "node_modules/@portkey-ai/gateway/build/start-server.js"), "--port=0", "--headless"], {
    cwd: dir,
    env: { ...process.env, ...options.env, NODE_ENV: "production" },
    timeoutMs: 30_000
  })

/** the headers that route a chat-completions request through Portkey to the fake upstream */
export const peerHeaders = (upstreamUrl: string): Record<string, string> => ({ "x-portkey-provider": "openai", "x-portkey-custom-host": `${upstreamUrl}/v1` })
