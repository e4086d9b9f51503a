#!/usr/bin/env node
// Compiles src/ to dist/ with tsc, bundles the dashboard's browser script into one file of dist/
// (below), and records, in dist/.build-stamp, a hash of everything that build read: the files under
// src/ (with src/tsconfig.json and the browser script's tsconfig), the root tsconfig.json and the
// compiler's version. `npm run build` always compiles; `npm start` runs this with --if-changed,
// which compiles only when that hash differs from the stamp (or dist/main.js is missing), so that a
// restart serves in about 2 s instead of after a whole-tree compile. Plain JavaScript: it runs
// before anything is built.
import { spawnSync } from "node:child_process"
import { createHash } from "node:crypto"
import * as fs from "node:fs"
import { createRequire } from "node:module"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const dist = path.join(root, "dist")
const stampFile = path.join(dist, ".build-stamp")
const require = createRequire(path.join(root, "package.json"))

const filesUnder = (dir) =>
  fs
    .readdirSync(dir, { withFileTypes: true })
    .flatMap((entry) => (entry.isDirectory() ? filesUnder(path.join(dir, entry.name)) : entry.isFile() ? [path.join(dir, entry.name)] : []))

const compilerVersion = () => {
  try {
    return JSON.parse(fs.readFileSync(require.resolve("typescript/package.json"), "utf8")).version
  } catch {
    return undefined
  }
}

/** The hash of the build's inputs, by content (a checkout or copy that only changes mtimes is no change). */
const inputsHash = (version) => {
  const hash = createHash("sha256").update(`typescript ${version}\0`)
  const files = [path.join(root, "tsconfig.json"), ...filesUnder(path.join(root, "src"))].sort()
  for (const file of files) hash.update(path.relative(root, file)).update("\0").update(fs.readFileSync(file)).update("\0")
  return hash.digest("hex")
}

const ifChanged = process.argv.includes("--if-changed")
const version = compilerVersion()
if (version === undefined) {
  // a production install (npm ci --omit=dev) has no compiler: it serves the dist/ it was given
  if (ifChanged && fs.existsSync(path.join(dist, "main.js"))) process.exit(0)
  console.error("build: typescript is not installed (npm ci --omit=dev leaves it out): build dist/ with the development install")
  process.exit(1)
}
const stamp = inputsHash(version)
const current = fs.existsSync(path.join(dist, "main.js")) && fs.existsSync(stampFile) && fs.readFileSync(stampFile, "utf8").trim() === stamp
if (ifChanged && current) process.exit(0)

const tsc = (...args) => spawnSync(process.execPath, [require.resolve("typescript/bin/tsc"), ...args], { stdio: "inherit" }).status ?? 1

/**
 * The dashboard's browser script (src/protocols/gateway/dashboard/browser/): its own tsconfig (DOM
 * types, not Node's) compiles its files, classic scripts that share one scope, into a scratch
 * directory; they are joined in the tsconfig's order inside one function, so that nothing is global
 * in the page, into dist/protocols/gateway/dashboard/script.js, which src/protocols/gateway/Dashboard.ts
 * inlines in the page. tsc alone bundles no modules, and its outFile is deprecated: hence the join.
 */
const bundleDashboard = () => {
  const browser = path.join(root, "src/protocols/gateway/dashboard/browser")
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "gateway-dashboard-"))
  try {
    const status = tsc("-p", path.join(browser, "tsconfig.json"), "--noEmit", "false", "--outDir", scratch)
    if (status !== 0) return status
    const prologue = '"use strict";\n'
    const parts = JSON.parse(fs.readFileSync(path.join(browser, "tsconfig.json"), "utf8")).files.map((file) => {
      const js = fs.readFileSync(path.join(scratch, file.replace(/\.ts$/, ".js")), "utf8")
      // a file with an import or export would be a module: tsc emits no prologue for it
      if (!js.startsWith(prologue)) throw new Error(`build: ${file} of the dashboard's browser script must be a classic script (no import or export)`)
      return js.slice(prologue.length)
    })
    const script = `${prologue}(() => {\n${parts.join("\n")}})();\n`
    if (/<\/script|<!--/i.test(script)) throw new Error("build: the dashboard's browser script holds </script or <!--, which would end the page's inline <script>")
    fs.writeFileSync(path.join(dist, "protocols/gateway/dashboard/script.js"), script)
    return 0
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true })
  }
}

// no stamp while compiling: a build that fails or is killed half-way is redone on the next start
fs.rmSync(stampFile, { force: true })
const compiled = tsc("-p", path.join(root, "src/tsconfig.json"))
if (compiled !== 0) process.exit(compiled)
const bundled = bundleDashboard()
if (bundled !== 0) process.exit(bundled)
// the hash of the inputs as read before compiling: a source edited during the build is compiled next time
fs.writeFileSync(stampFile, stamp + "\n")
