/**
 * Debian's chromium for the browser tests, driven by playwright-core: installed with apt-get when
 * missing (root only, bounded), launched headless with a page that records every fault it shows.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import { promisify } from "node:util"
import { chromium, type Browser, type Page } from "playwright-core"

export const CHROMIUM = "/usr/bin/chromium"
/** the bound on installing chromium; a beforeAll that may install it waits this long and a minute more */
export const INSTALL_TIMEOUT_MS = 8 * 60_000

const execFileAsync = promisify(execFile)

/** Install Debian's chromium when it is missing (root only, bounded); returns the install time in ms. */
export const ensureChromium = async (): Promise<number> => {
  if (fs.existsSync(CHROMIUM)) return 0
  if (process.getuid?.() !== 0) {
    throw new Error(`${CHROMIUM} is missing and this test is not running as root: install it with 'apt-get install -y chromium'`)
  }
  const started = Date.now()
  try {
    await execFileAsync(
      "bash",
      ["-c", "apt-get update && apt-get install -y --no-install-recommends -o DPkg::Lock::Timeout=120 chromium"],
      { env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" }, timeout: INSTALL_TIMEOUT_MS, maxBuffer: 64 * 1024 * 1024 }
    )
  } catch (error) {
    const e = error as { message?: string; stderr?: string }
    throw new Error(`installing chromium with apt-get failed (needed at ${CHROMIUM}): ${e.message ?? String(error)}\n${(e.stderr ?? "").slice(-2000)}`)
  }
  if (!fs.existsSync(CHROMIUM)) throw new Error(`apt-get finished but ${CHROMIUM} is still missing`)
  return Date.now() - started
}

/** A headless browser and one page; `requested` holds every URL the page asked for, `problems` its faults. */
export interface BrowserPage {
  readonly browser: Browser
  readonly page: Page
  readonly requested: Array<string>
  readonly problems: Array<string>
}

export const openPage = async (): Promise<BrowserPage> => {
  const installMs = await ensureChromium()
  if (installMs > 0) console.log(`installed chromium in ${(installMs / 1000).toFixed(1)} s`)
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--headless", "--no-sandbox", "--disable-gpu"], timeout: 20_000 })
  const page = await browser.newPage({ viewport: { width: 1360, height: 900 } })
  page.setDefaultTimeout(8_000)
  const requested: Array<string> = []
  const problems: Array<string> = []
  page.on("request", (r) => requested.push(r.url()))
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`))
  page.on("console", (m) => {
    // refused API calls log "Failed to load resource"; anything else (CSP, Trusted Types) is a fault
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) problems.push(m.text())
  })
  return { browser, page, requested, problems }
}
