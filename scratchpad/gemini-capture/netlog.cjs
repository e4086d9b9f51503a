// Preloaded into every node process of a capture run (NODE_OPTIONS="--require .../netlog.cjs"):
// appends one JSON line per outgoing socket connect, DNS lookup and child process spawn to
// $NETLOG_FILE, so the capture can show that the CLI reached nothing but the capture server.
"use strict"
const fs = require("node:fs")
const net = require("node:net")
const dns = require("node:dns")
const cp = require("node:child_process")

const file = process.env.NETLOG_FILE
const log = (entry) => {
  if (!file) return
  try {
    fs.appendFileSync(file, JSON.stringify({ t: Date.now(), pid: process.pid, ...entry }) + "\n")
  } catch {
    // ignore
  }
}

const origConnect = net.Socket.prototype.connect
net.Socket.prototype.connect = function (...args) {
  try {
    const first = args[0]
    let target
    if (Array.isArray(first)) target = first[0]
    else if (first !== null && typeof first === "object") target = { host: first.host, port: first.port, path: first.path }
    else if (typeof first === "string" && Number.isNaN(Number(first))) target = { path: first }
    else target = { port: first, host: typeof args[1] === "string" ? args[1] : undefined }
    log({ kind: "connect", ...target })
  } catch {
    // ignore
  }
  return origConnect.apply(this, args)
}

const origLookup = dns.lookup
dns.lookup = function (hostname, ...rest) {
  log({ kind: "dns.lookup", hostname })
  return origLookup.call(this, hostname, ...rest)
}
if (dns.promises && dns.promises.lookup) {
  const origP = dns.promises.lookup
  dns.promises.lookup = function (hostname, ...rest) {
    log({ kind: "dns.promises.lookup", hostname })
    return origP.call(this, hostname, ...rest)
  }
}

const origSpawn = cp.ChildProcess.prototype.spawn
cp.ChildProcess.prototype.spawn = function (options) {
  try {
    log({ kind: "spawn", file: options && options.file, args: options && options.args ? options.args.slice(0, 8).map((a) => String(a).slice(0, 200)) : undefined })
  } catch {
    // ignore
  }
  return origSpawn.call(this, options)
}

const origSpawnSync = cp.spawnSync
cp.spawnSync = function (command, args, ...rest) {
  log({ kind: "spawnSync", file: command, args: Array.isArray(args) ? args.slice(0, 8).map((a) => String(a).slice(0, 200)) : undefined })
  return origSpawnSync.call(this, command, args, ...rest)
}
for (const name of ["execSync", "execFileSync"]) {
  const orig = cp[name]
  cp[name] = function (command, ...rest) {
    log({ kind: name, file: String(command).slice(0, 200), args: Array.isArray(rest[0]) ? rest[0].slice(0, 8).map((a) => String(a).slice(0, 200)) : undefined })
    return orig.call(this, command, ...rest)
  }
}
// make `import { lookup } from "node:dns"` etc. (ESM named imports) see the wrappers too
require("node:module").syncBuiltinESMExports()
