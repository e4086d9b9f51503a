/**
 * Cost and budgets on the operator dashboard, in chromium (issue 17). A gateway with a priced mock
 * provider, an unpriced one, an app with a USD budget per month and a runtime key with a token
 * budget per day gets a few calls whose usage the mock's `::usage` directive sets; the page must
 * show the cost over time, per model and per app (an unpriced call as "unknown", never $0), and each
 * budget's spending against its limit with its period's end. A key refused the budgets route
 * keeps its session and the panel says why.
 */
import type { Browser, Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { INSTALL_TIMEOUT_MS, openPage } from "../support/Chromium.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { pollUntil } from "./helpers.js"

const ADMIN = "sk-admin-dashboard-cost-0001"
const SHOP = "sk-shop-dashboard-cost-0001"

type Json = Record<string, unknown>

/** a small output cap: a call reserves its input estimate plus the cap, well inside the token budget */
const chat = (gateway: TestGateway, key: string, model: string, text: string) =>
  fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, max_tokens: 64, messages: [{ role: "user", content: text }] })
  })

const admin = async (gateway: TestGateway, method: string, path: string, body?: unknown): Promise<Json> => {
  const r = await fetch(`${gateway.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {})
  })
  expect(r.status).toBeLessThan(300)
  return (await r.json()) as Json
}

/** the start of the next UTC month and of the next UTC day: where the budgets' periods end */
const nextMonth = () => {
  const now = new Date()
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)).toISOString()
}
const nextDay = () => {
  const now = new Date()
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1)).toISOString()
}

describe("cost and budgets on the dashboard, in chromium", () => {
  let gateway: TestGateway
  let browser: Browser
  let page: Page
  let problems: Array<string> = []
  let labKeyId = ""
  let labKey = ""

  beforeAll(async () => {
    gateway = await startGateway({
      adminKey: ADMIN,
      keys: [{ key: SHOP, app: "shop" }],
      providers: { mock: { type: "mock", price: { input: 1, output: 2 } }, free: { type: "mock" } },
      apps: { shop: { limits: { budgets: [{ usd: 5, per: "month" }] } } }
    })
    const lab = await admin(gateway, "POST", "/gateway/admin/keys", { app: "lab", budgets: [{ tokens: 1000, per: "day" }] })
    labKeyId = lab.id as string
    labKey = lab.key as string
    // 100 input and 50 output tokens at $1 and $2 per million: $0.0002 a call
    for (let i = 0; i < 3; i++) expect((await chat(gateway, SHOP, "mock/echo", "::usage 100 50\nhi")).status).toBe(200)
    expect((await chat(gateway, labKey, "mock/echo", "::usage 100 50\nhi")).status).toBe(200)
    // no price: a cost nobody knows, counted as one unpriced call
    expect((await chat(gateway, labKey, "free/echo", "::usage 10 5\nhi")).status).toBe(200)
    // usage is written in batches: wait until the report and the budgets have every call
    const report = await pollUntil(
      () => admin(gateway, "GET", "/gateway/usage"),
      (r) => (r.totals as Json).requests === 5,
      5000
    )
    expect(report.totals).toMatchObject({ requests: 5, costUsd: 0.0008, unpricedCalls: 1 })
    const budgets = await pollUntil(
      () => admin(gateway, "GET", "/gateway/admin/budgets"),
      (b) => JSON.stringify(b).includes('"used":165'),
      5000
    )
    expect(budgets).toMatchObject({
      apps: [{ app: "shop", budgets: [{ usd: 5, per: "month", limit: 5, used: 0.0006, reserved: 0 }] }],
      keys: [{ id: labKeyId, app: "lab", budgets: [{ tokens: 1000, per: "day", limit: 1000, used: 165, reserved: 0 }] }]
    })
    ;({ browser, page, problems } = await openPage())
  }, INSTALL_TIMEOUT_MS + 60_000)

  afterAll(async () => {
    await browser?.close()
    await gateway?.close()
  })

  it("shows the cost: a total with the unpriced calls beside it, over time, per model and per app", async () => {
    await page.goto(`${gateway.url}/gateway/dashboard`)
    await page.locator("#key").fill(ADMIN)
    await page.locator("#signin-button").click()
    await page.locator("#dash").waitFor({ state: "visible" })

    await expect.poll(() => page.locator("#usage-stats").textContent()).toContain("Cost≥ $0.00081 unpriced call: cost unknown")
    expect(await page.locator("#cost-note").textContent()).toContain("≥ $0.0008 · 1 unpriced call not in the bars")
    expect(await page.locator("#cost-legend").textContent()).toBe("priced calls (USD)unpriced calls (cost unknown)")
    // every call of this test falls in one or two hours: the bars add up to the priced cost
    const bars = await page.locator('#cost-chart rect.bar[data-series="priced calls (USD)"] title').allTextContents()
    expect(bars.length).toBeGreaterThan(0)
    expect(bars.map((t) => Number(t.split("$").pop())).reduce((a, b) => a + b, 0)).toBeCloseTo(0.0008, 9)
    expect(await page.locator("#cost-chart rect.unknown").getAttribute("data-unpriced")).toBe("1")
    expect(await page.locator("#cost-chart rect.unknown title").textContent()).toContain("1 unpriced call: cost unknown")
    expect(await page.locator("#cost-chart svg").getAttribute("aria-label")).toBe("Cost over time in USD")
    expect((await page.locator("#cost-chart svg > text").allTextContents()).some((t) => t.startsWith("$0.000"))).toBe(true)

    const cells = async (table: string, name: string) =>
      (await page.locator(`${table} tbody tr`, { hasText: name }).locator("td").allTextContents()).slice(6)
    expect(await cells("#models-table", "mock/echo")).toEqual(["$0.0008", "0"])
    expect(await cells("#models-table", "free/echo")).toEqual(["unknown", "1"])
    expect(await cells("#apps-table", "shop")).toEqual(["$0.0006", "0"])
    expect(await cells("#apps-table", "lab")).toEqual(["≥ $0.0002", "1"])

    // the per-app breakdown by cost: dollars per app and day, the unpriced call marked, not drawn as $0
    await page.locator('[data-metric-for="apps"] button[data-metric="cost"]').click()
    expect(await page.locator("#apps-chart svg").getAttribute("aria-label")).toBe("Per app cost per day")
    expect(await page.locator('#apps-chart rect.bar[data-series="shop"] title').textContent()).toContain("shop: $0.0006")
    expect(await page.locator('#apps-chart rect.bar[data-series="lab"] title').textContent()).toContain("lab: $0.0002")
    expect(await page.locator("#apps-chart rect.unknown").getAttribute("data-unpriced")).toBe("1")
    expect(await page.locator("#apps-legend").textContent()).toContain("unpriced calls (cost unknown)")
  })

  it("shows each budget's spending against its limit, with the end of its period", async () => {
    const shop = page.locator('#budgets-table tr[data-holder="shop"][data-budget="usd"]')
    await expect.poll(() => shop.count()).toBe(1)
    expect(await shop.locator(".holder").textContent()).toBe("app shop")
    expect(await shop.locator(".kind").textContent()).toBe("USD per month (UTC)")
    expect(await shop.locator(".spent").textContent()).toBe("$0.0006 of $5.00 · <0.1%")
    expect(await shop.locator("td").nth(1).getAttribute("title")).toBe("used $0.0006, reserved $0.00 of $5.00")
    // a sliver, not nothing: 0.012 % of the bar would round to no pixel
    expect(Number(await shop.locator("rect.used").getAttribute("width"))).toBe(2)
    expect(await shop.locator("rect.reserved").count()).toBe(0)
    expect(await shop.locator(".ends").getAttribute("title")).toBe(nextMonth())
    expect(await shop.locator(".ends").textContent()).toMatch(/^[A-Z][a-z]{2} 1, \d{4}, 00:00 UTC$/)

    const lab = page.locator(`#budgets-table tr[data-holder="${labKeyId}"][data-budget="tokens"]`)
    expect(await lab.locator(".holder").textContent()).toBe(`${labKeyId} lab`)
    expect(await lab.locator(".kind").textContent()).toBe("tokens per day (UTC)")
    expect(await lab.locator(".spent").textContent()).toBe("165 tokens of 1,000 tokens · 17%")
    const track = Number(await lab.locator("rect.track").getAttribute("width"))
    expect(Number(await lab.locator("rect.used").getAttribute("width"))).toBe(Math.round(track * 0.165))
    expect(await lab.locator(".ends").getAttribute("title")).toBe(nextDay())
    expect(await page.locator("#budgets-table .over").count()).toBe(0)

    // a call under way holds a reservation: the bar and the text show it beside what is used
    const controller = new AbortController()
    const slow = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${labKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "mock/echo", stream: true, max_tokens: 64, messages: [{ role: "user", content: "::chunks 50\n::delay 200\nslow" }] }),
      signal: controller.signal
    })
    expect(slow.status).toBe(200)
    try {
      const reserved = (b: Json) => ((b.keys as Array<{ budgets: Array<{ reserved: number }> }>)[0]?.budgets[0]?.reserved ?? 0) > 0
      expect(reserved(await pollUntil(() => admin(gateway, "GET", "/gateway/admin/budgets"), reserved, 5000))).toBe(true)
      await page.reload()
      await expect.poll(() => lab.locator(".spent").textContent()).toMatch(/^165 tokens of 1,000 tokens · 17% · \d+ tokens reserved$/)
      expect(Number(await lab.locator("rect.reserved").getAttribute("width"))).toBeGreaterThan(0)
    } finally {
      controller.abort()
      await slow.text().catch(() => undefined)
    }
  })

  it("a key refused the budgets route keeps its session; the panel says budgets need the admin key", async () => {
    // the gateway's own refusal of an app key, served to the page in place of the admin's answer
    const refused = await fetch(`${gateway.url}/gateway/admin/budgets`, { headers: { authorization: `Bearer ${SHOP}` } })
    expect(refused.status).toBe(403)
    const body = await refused.text()
    await page.route("**/gateway/admin/budgets", (route) => route.fulfill({ status: 403, contentType: refused.headers.get("content-type") ?? "application/json", body }))
    await page.reload()
    await page.locator("#dash").waitFor({ state: "visible" })
    await page.locator("#budgets-admin").waitFor({ state: "visible" })
    expect(await page.locator("#budgets-admin").textContent()).toContain("Budgets are read with the admin key")
    expect(await page.locator("#budgets-wrap").isHidden()).toBe(true)
    expect(await page.locator("#budgets-error").isHidden()).toBe(true)
    expect(await page.locator("#signin").isHidden()).toBe(true)
    expect(await page.evaluate<string | null>("sessionStorage.getItem('gateway.adminKey')")).toBe(ADMIN)

    await page.unroute("**/gateway/admin/budgets")
    await page.reload()
    await page.locator('#budgets-table tr[data-holder="shop"]').waitFor({ state: "visible" })
    expect(await page.locator("#budgets-admin").isHidden()).toBe(true)
    expect(problems).toEqual([])
  })
})
