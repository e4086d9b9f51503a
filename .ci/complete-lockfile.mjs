#!/usr/bin/env node
// Adds lockfile entries for optional platform packages (rollup, esbuild, msgpackr-extract builds for
// other systems) that the registry mirror of this workplace does not serve: npm then leaves them out
// of package-lock.json, and npm 11's `npm ci` refuses a lockfile that lacks any package named in an
// optionalDependencies map. The added entries are optional and name their os/cpu, so `npm ci` skips
// them on other platforms. Run after `npm install` changes the lockfile: node .ci/complete-lockfile.mjs
// (or, for test/clients' lockfile: node .ci/complete-lockfile.mjs test/clients/package-lock.json)
import fs from "node:fs"
import path from "node:path"

const file = process.argv[2] !== undefined ? path.resolve(process.argv[2]) : new URL("../package-lock.json", import.meta.url)
const lock = JSON.parse(fs.readFileSync(file, "utf8"))
const packages = lock.packages

const osNames = ["android", "darwin", "freebsd", "linux", "openbsd", "netbsd", "openharmony", "sunos", "win32", "aix", "cygwin"]
const cpuNames = ["arm64", "arm", "x64", "ia32", "ppc64", "riscv64", "s390x", "loong64", "mips64el", "loong64"]
const platformOf = (name) => {
  const base = name.split("/").pop()
  const os = osNames.find((o) => base.includes(o === "win32" ? "win32" : o))
  const cpu = cpuNames.find((c) => new RegExp(`(^|-)${c}(-|$)`).test(base)) ?? (base.includes("ppc64") ? "ppc64" : undefined)
  return { os, cpu }
}

let added = 0
for (const [where, entry] of Object.entries(packages)) {
  if (where === "" || entry.optionalDependencies === undefined) continue
  for (const [name, spec] of Object.entries(entry.optionalDependencies)) {
    const nested = `${where}/node_modules/${name}`
    const hoisted = `node_modules/${name}`
    if (packages[nested] !== undefined || packages[hoisted] !== undefined) continue
    const { os, cpu } = platformOf(name)
    if (os === undefined) continue // not a platform build: leave it to npm
    packages[hoisted] = {
      version: spec.replace(/^[\^~=]/, ""),
      ...(cpu !== undefined ? { cpu: [cpu] } : {}),
      ...(entry.dev ? { dev: true } : {}),
      optional: true,
      os: [os]
    }
    added++
  }
}
lock.packages = Object.fromEntries(Object.entries(packages).sort(([a], [b]) => (a === "" ? -1 : b === "" ? 1 : a < b ? -1 : a > b ? 1 : 0)))
fs.writeFileSync(file, JSON.stringify(lock, null, 2) + "\n")
console.log(`complete-lockfile: added ${added} optional platform entries`)
