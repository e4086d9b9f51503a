/**
 * The operator dashboard (`GET /gateway/dashboard`) in a real browser: Debian's chromium driven by
 * playwright-core. A gateway with an admin key, two apps, a fake chat-completions upstream and the
 * mock provider gets some traffic (one call fails upstream); the page then signs in with the admin
 * key and must show status, charts per model and app, top users and runtime keys, all drawn from
 * the JSON routes, under a CSP that admits nothing but the page itself. No model has a price here,
 * so every cost shows as unknown; dashboard-cost.test.ts has the priced calls and the budgets.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import type { Browser, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { INSTALL_TIMEOUT_MS, openPage } from "../support/Chromium.js"
import { chatSseChunks, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const ADMIN = "sk-admin-dashboard-0001"
const ALPHA = "sk-team-alpha-key-0001"
const BETA = "sk-team-beta-key-0001"
/** a model name that would run script if the page ever put data into the DOM as HTML */
const HOSTILE = `<img src=x onerror="window.__pwned=1">`
const SCREENSHOT = path.join(os.tmpdir(), `gateway-dashboard-${process.pid}.png`)
const SCRATCHPAD_COPY = fileURLToPath(new URL("../../scratchpad/dashboard.png", import.meta.url))

const chat = (gateway: TestGateway, key: string, model: string, user: string, stream = false) =>
  fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "x-gateway-user": user, "session-id": `${user}-session` },
    body: JSON.stringify({ model, stream, messages: [{ role: "user", content: "hello" }] })
  })

describe("operator dashboard in chromium", () => {
  let upstream: FakeUpstream
  let gateway: TestGateway
  let browser: Browser
  let page: Page
  let requested: Array<string> = []
  let problems: Array<string> = []

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    gateway = await startGateway({
      adminKey: ADMIN,
      keys: [
        { key: ALPHA, app: "team-alpha" },
        { key: BETA, app: "team-beta" }
      ],
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "k" }, local: { type: "mock" } },
      aliases: { fast: "up/gpt-fast", smart: "up/gpt-smart" }
    })
    const calls: Array<[string, string, string]> = [
      [ALPHA, "fast", "alice"],
      [ALPHA, "fast", "alice"],
      [ALPHA, "smart", "bob"],
      [ALPHA, "local/echo", "alice"],
      [BETA, "fast", "carol"],
      [BETA, "local/echo", "carol"],
      [BETA, "smart", "dave"]
    ]
    for (const [key, model, user] of calls) expect((await chat(gateway, key, model, user)).status).toBe(200)
    // an unknown model fails before any provider and is recorded under the name the caller sent
    expect((await chat(gateway, ALPHA, HOSTILE, "eve")).status).toBe(404)
    // one call fails: the upstream drops the connection mid-answer (a failure of provider "up")
    upstream.script({ kind: "resetAfter", chunks: chatSseChunks({ content: "a partial answer" }).slice(0, 3) })
    const failing = await chat(gateway, BETA, "smart", "bob", true)
    expect(failing.status).toBe(200)
    expect(await failing.text()).toContain("error")

    ;({ browser, page, requested, problems } = await openPage())
  }, INSTALL_TIMEOUT_MS + 60_000)

  afterAll(async () => {
    await browser?.close()
    await gateway?.close()
    await upstream?.close()
    fs.rmSync(SCREENSHOT, { force: true })
  })

  it("serves the page without a key, with a strict CSP (fresh nonce), nosniff, no framing, no referrer", async () => {
    const first = await fetch(`${gateway.url}/gateway/dashboard`)
    const second = await fetch(`${gateway.url}/gateway/dashboard`)
    expect(first.status).toBe(200)
    expect(first.headers.get("content-type")).toBe("text/html; charset=utf-8")
    expect(first.headers.get("x-content-type-options")).toBe("nosniff")
    expect(first.headers.get("x-frame-options")).toBe("DENY")
    expect(first.headers.get("referrer-policy")).toBe("no-referrer")
    const csp = first.headers.get("content-security-policy") ?? ""
    expect(csp).toContain("default-src 'none'")
    expect(csp).toContain("connect-src 'self'")
    expect(csp).toContain("frame-ancestors 'none'")
    expect(csp).not.toContain("unsafe-inline")
    expect(csp).not.toContain("unsafe-eval")
    const nonce = /script-src 'nonce-([^']+)'/.exec(csp)?.[1]
    expect(nonce).toBeDefined()
    expect(second.headers.get("content-security-policy")).not.toContain(nonce!)
    const html = await first.text()
    expect(html).toContain(`<script nonce="${nonce}">`)
    expect(html).toContain(`<style nonce="${nonce}">`)
    // self-contained: no external script, style, font or image, and no HTML strings put into the DOM
    expect(html).not.toMatch(/<(script|link|img)[^>]+(src|href)="(https?:)?\/\//i)
    expect(html).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write/)
    await second.text()
  })

  it("shows the problem detail for a wrong key and for an app key, and keeps neither", async () => {
    await page.goto(`${gateway.url}/gateway/dashboard`)
    await page.locator("#key").fill("sk-not-a-key-at-all")
    await page.locator("#signin-button").click()
    await expect.poll(() => page.locator("#signin-error").textContent()).toContain("Invalid API key")
    expect(await page.locator("#signin-error").textContent()).toContain("invalid_api_key")
    expect(await page.locator("#dash").isHidden()).toBe(true)

    await page.locator("#key").fill(ALPHA)
    await page.locator("#signin-button").click()
    await expect.poll(() => page.locator("#signin-error").textContent()).toContain("admin key")
    expect(await page.locator("#signin-error").textContent()).toContain("admin_key_required")
    expect(await page.evaluate<number>("sessionStorage.length")).toBe(0)
  })

  it("signs in with the admin key: status, charts per model and app, error rates, top users", async () => {
    await page.locator("#key").fill(ADMIN)
    await page.locator("#signin-button").click()
    await page.locator("#dash").waitFor({ state: "visible" })
    // the key lives in sessionStorage only
    expect(await page.evaluate<string | null>("sessionStorage.getItem('gateway.adminKey')")).toBe(ADMIN)
    expect(await page.evaluate<string>("document.cookie")).toBe("")
    expect(page.url()).not.toContain(ADMIN)

    // status
    await expect.poll(() => page.locator("#status-stats").textContent()).toContain("Version0.1.0")
    expect(await page.locator("#status-stats").textContent()).toContain("Uptime")
    const up = page.locator('#providers tr[data-provider="up"]')
    await expect.poll(() => up.textContent()).toContain("openai")
    expect(await up.locator("td").nth(2).textContent()).toBe("6")
    expect(await up.locator("td").nth(3).textContent()).toBe("1")
    expect(await up.locator("td").nth(4).textContent()).toBe("17%")
    expect(await page.locator('#providers tr[data-provider="local"]').textContent()).toContain("mock")

    // usage totals and the charts: the default range is the last 7 days, so hourly data shows
    await expect.poll(() => page.locator("#models-chart rect.bar").count()).toBeGreaterThan(0)
    expect(await page.locator("#usage-stats").textContent()).toContain("Requests9")
    expect(await page.locator("#usage-stats").textContent()).toContain("22% error rate")
    expect(await page.locator("#requests-note").textContent()).toBe("hourly, UTC")
    expect(await page.locator("#requests-chart rect.bar").count()).toBeGreaterThan(0)
    expect(await page.locator('#requests-chart rect.bar[data-series="failed"]').count()).toBe(1)
    expect(await page.locator("#tokens-chart rect.bar").count()).toBeGreaterThan(0)
    expect(await page.locator("#requests-chart svg text").count()).toBeGreaterThan(2)
    for (const model of ["up/gpt-fast", "up/gpt-smart", "local/echo"]) {
      expect(await page.locator("#models-legend").textContent()).toContain(model)
      expect(await page.locator(`#models-chart rect.bar[data-series="${model}"]`).count()).toBe(1)
    }
    expect(await page.locator("#models-table tbody tr").count()).toBe(4)
    // hostile data is shown as text: no element made from it, no script run
    expect(await page.locator("#models-table").textContent()).toContain(HOSTILE)
    expect(await page.locator("#models-legend").textContent()).toContain(HOSTILE)
    expect(await page.locator("img").count()).toBe(0)
    expect(await page.evaluate<unknown>("window.__pwned")).toBeUndefined()
    const smart = page.locator("#models-table tbody tr", { hasText: "up/gpt-smart" })
    expect(await smart.locator("td").nth(3).textContent()).toBe("33%")
    // no provider here has a price: every cost is unknown (never $0), counted as unpriced calls
    expect(await smart.locator("td").nth(6).textContent()).toBe("unknown")
    expect(await smart.locator("td").nth(7).textContent()).toBe("3")
    expect(await page.locator("#usage-stats").textContent()).toContain("Costunknown9 unpriced calls: cost unknown")
    expect(await page.locator("#cost-chart rect.bar").count()).toBe(0)
    expect(await page.locator("#cost-chart rect.unknown").count()).toBeGreaterThan(0)
    expect(await page.locator("#cost-chart").textContent()).toContain("Only unpriced calls in this range: cost unknown")
    for (const id of ["#usage-stats", "#models-table", "#apps-table", "#cost-note"]) expect(await page.locator(id).textContent()).not.toContain("$")
    await expect.poll(() => page.locator("#budgets-table tbody").textContent()).toContain("No budgets")
    for (const app of ["team-alpha", "team-beta"]) {
      expect(await page.locator("#apps-legend").textContent()).toContain(app)
      expect(await page.locator(`#apps-chart rect.bar[data-series="${app}"]`).count()).toBe(1)
    }
    // switching the breakdown to tokens redraws the bars
    await page.locator('[data-metric-for="models"] button[data-metric="tokens"]').click()
    expect(await page.locator("#models-chart svg").getAttribute("aria-label")).toContain("tokens")
    expect(await page.locator("#models-chart rect.bar").count()).toBeGreaterThan(0)

    // top users, most requests first
    const users = await page.locator("#users-table tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-user")))
    expect(users[0]).toBe("alice")
    expect([...users].sort()).toEqual(["alice", "bob", "carol", "dave", "eve"])
    expect(await page.locator('#users-table tr[data-user="alice"] td').nth(1).textContent()).toBe("3")

    // top sessions (each user here runs one session), most requests first
    const sessions = await page.locator("#sessions-table tbody tr").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-session")))
    expect(sessions[0]).toBe("alice-session")
    expect([...sessions].sort()).toEqual(["alice-session", "bob-session", "carol-session", "dave-session", "eve-session"])
    expect(await page.locator('#sessions-table tr[data-session="alice-session"] td').nth(1).textContent()).toBe("3")

    // an app filter narrows the report
    await page.locator("#app-filter").selectOption("team-beta")
    await page.locator("#usage-apply").click()
    await expect.poll(() => page.locator("#usage-note").textContent()).toContain("app team-beta")
    expect(await page.locator("#usage-stats").textContent()).toContain("Requests4")
    await page.locator("#app-filter").selectOption("")
    await page.locator("#usage-apply").click()
    await expect.poll(() => page.locator("#usage-stats").textContent()).toContain("Requests9")
  })

  it("shows the usage route's detail for a bad range", async () => {
    await page.locator("#from").fill("2030-01-02")
    await page.locator("#to").fill("2030-01-01")
    await page.locator("#usage-apply").click()
    await expect.poll(() => page.locator("#usage-error").textContent()).toContain("from is after to")
    await page.locator('.presets button[data-days="7"]').click()
    await expect.poll(() => page.locator("#usage-error").isHidden()).toBe(true)
  })

  it("creates a runtime key (secret shown once, it works), lists it, and saves a screenshot", async () => {
    await page.locator("#key-app").fill("team-gamma")
    await page.locator("#key-create").click()
    const secretBox = page.locator("#new-secret-value")
    await secretBox.waitFor({ state: "visible" })
    const secret = (await secretBox.textContent()) ?? ""
    expect(secret.length).toBeGreaterThanOrEqual(20)
    expect((await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${secret}` } })).status).toBe(200)
    const row = page.locator("#keys-table tbody tr", { hasText: "team-gamma" })
    await expect.poll(() => row.count()).toBe(1)
    expect(await page.locator("#keys-table").textContent()).not.toContain(secret)

    // dismissed, the secret is gone from the page, and a reload does not bring it back
    await page.locator("#new-secret button", { hasText: "I have stored it" }).click()
    expect(await page.locator("body").textContent()).not.toContain(secret)
    await page.reload()
    await page.locator("#dash").waitFor({ state: "visible" })
    await expect.poll(() => page.locator("#keys-table tbody tr", { hasText: "team-gamma" }).count()).toBe(1)
    await expect.poll(() => page.locator("#models-chart rect.bar").count()).toBeGreaterThan(0)
    expect(await page.locator("body").textContent()).not.toContain(secret)

    await page.screenshot({ path: SCREENSHOT, fullPage: true })
    expect(fs.statSync(SCREENSHOT).size).toBeGreaterThan(30_000)
    // the tracked copy in scratchpad/ changes only when asked: a test run leaves the tree as it was
    if (process.env.UPDATE_DASHBOARD_SCREENSHOT === "1") fs.copyFileSync(SCREENSHOT, SCRATCHPAD_COPY)
  })

  it("revokes a runtime key: it leaves the list and stops working", async () => {
    const row = page.locator("#keys-table tbody tr", { hasText: "team-gamma" })
    const id = (await row.getAttribute("data-key-id")) ?? ""
    expect(id).not.toBe("")
    page.once("dialog", (dialog) => void dialog.accept())
    await row.locator("button[data-revoke]").click()
    await expect.poll(() => page.locator(`#keys-table tr[data-key-id="${id}"]`).count()).toBe(0)
    expect(await page.locator("#keys-notice").textContent()).toContain(`Revoked key ${id}`)
    const list = (await (await fetch(`${gateway.url}/gateway/admin/keys`, { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as { data: Array<{ id: string }> }
    expect(list.data.map((k) => k.id)).not.toContain(id)
  })

  it("signs out, forgetting the key; the page reached nothing but its own origin and broke no policy", async () => {
    await page.locator("#signout").click()
    await page.locator("#signin").waitFor({ state: "visible" })
    expect(await page.evaluate<number>("sessionStorage.length")).toBe(0)
    expect(await page.locator("#status-stats").textContent()).toBe("")
    expect(requested.length).toBeGreaterThan(0)
    expect(requested.filter((url) => !url.startsWith(`${gateway.url}/`) && !url.startsWith("data:"))).toEqual([])
    expect(requested.some((url) => url.includes(ADMIN))).toBe(false)
    expect(problems).toEqual([])
  })
})
