import { Effect, Layer } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { allRoutes, servicesLayer } from "../../src/App.js"
import type { Route } from "../../src/http/Route.js"
import { telemetryLayer } from "../../src/Telemetry.js"
import { configOf, startGateway, type TestGateway } from "../support/Gateway.js"
import { call, parse, type Json } from "./helpers.js"

/**
 * The discovery page `GET /` (spec 4.5): it lists the route table the router is built from, every
 * entry with its method (DELETE routes and paths with parameters included), as JSON and as HTML,
 * and every path it lists is one the gateway serves.
 */

const document = { providers: { mock: { type: "mock" } } }

interface Listed {
  readonly method: string
  readonly path: string
  readonly label: string
}

/** The route table as the gateway builds it for this config. */
const routeTable = async (): Promise<ReadonlyArray<Route>> => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "gw-routes-"))
  try {
    const config = configOf({ accessLog: false, ...document, listen: { host: "127.0.0.1", port: 0 }, dataDir })
    return await Effect.runPromise(allRoutes.pipe(Effect.scoped, Effect.provide(Layer.merge(servicesLayer(config), telemetryLayer(config)))))
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true })
  }
}

/** A path to request for a listed path: each `{name}` filled with a value the route accepts. */
const SAMPLE: Readonly<Record<string, string>> = { model: "mock/echo", method: "embedContent", id: "x1", name: "x1" }
const fill = (template: string) => template.replace(/\{([a-z]+)\}/g, (_, name: string) => SAMPLE[name] ?? "x1")
const placeholders = (template: string) => [...template.matchAll(/\{([a-z]+)\}/g)].map((m) => m[1])

const escapeHtml = (s: string) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c] ?? c)

describe("GET / lists every route of the route table", () => {
  let gw: TestGateway
  let table: ReadonlyArray<Route>
  beforeAll(async () => {
    gw = await startGateway(document)
    table = await routeTable()
  })
  afterAll(async () => {
    await gw?.close()
  })

  /** What the page must list for each table entry: the literal path, or the matcher's template. */
  const expected = (): ReadonlyArray<Listed> =>
    table.map((r) => ({ method: r.method, path: typeof r.path === "string" ? r.path : r.template ?? "(no template)", label: r.label }))

  it("the table has DELETE routes and routes with parameters, and each template names what its matcher takes", () => {
    expect(table.some((r) => r.method === "DELETE")).toBe(true)
    const matchers = table.filter((r) => typeof r.path !== "string")
    expect(matchers.length).toBeGreaterThan(0)
    for (const r of matchers) {
      if (typeof r.path === "string") continue
      const template = r.template ?? ""
      expect(placeholders(template).length, r.label).toBeGreaterThan(0)
      const params = r.path(fill(template))
      expect(params, `${r.label}: ${template} is not matched by its own route`).toBeDefined()
      for (const name of placeholders(template)) expect(params, r.label).toHaveProperty(name)
    }
  })

  it("JSON: every entry with its method, path (a template where the path takes a parameter) and label", async () => {
    const r = await call(gw, "GET", "/")
    expect(r.status).toBe(200)
    expect(r.headers["content-type"]).toMatch(/^application\/json/)
    const routes = parse(r).routes as ReadonlyArray<Json>
    expect(routes).toEqual(expected())
    for (const [method, listed] of [
      ["GET", "/v1/responses/{id}"],
      ["DELETE", "/v1/responses/{id}"],
      ["GET", "/v1/responses/{id}/input_items"],
      ["GET", "/v1/files/{id}"],
      ["DELETE", "/v1/files/{id}"],
      ["GET", "/v1/files/{id}/content"],
      ["POST", "/v1beta/models/{model}:generateContent"],
      ["POST", "/v1beta/models/{model}:streamGenerateContent"],
      ["POST", "/v1beta/models/{model}:countTokens"],
      ["GET", "/v1beta/models/{model}"],
      ["GET", "/v1beta/files/{name}"],
      ["DELETE", "/v1beta/files/{name}"],
      ["DELETE", "/gateway/admin/keys/{id}"],
      ["POST", "/gateway/admin/keys"],
      ["GET", "/"]
    ]) {
      expect(routes).toContainEqual(expect.objectContaining({ method, path: listed }))
    }
  })

  it("HTML: a row for every entry", async () => {
    const r = await call(gw, "GET", "/", { headers: { accept: "text/html,application/xhtml+xml" } })
    expect(r.status).toBe(200)
    expect(r.headers["content-type"]).toMatch(/^text\/html/)
    const rows = [...r.text.matchAll(/<tr><td>/g)].length
    expect(rows).toBe(table.length)
    for (const e of expected()) {
      expect(r.text, `${e.method} ${e.path}`).toContain(`<tr><td>${e.method}</td><td><code>${escapeHtml(e.path)}</code></td><td>${escapeHtml(e.label)}</td></tr>`)
    }
  })

  it("every listed route answers its method: never a route-not-found 404 nor a 405", async () => {
    const routes = parse(await call(gw, "GET", "/")).routes as ReadonlyArray<Listed>
    expect(routes.length).toBe(table.length)
    for (const route of routes) {
      const target = fill(route.path)
      const r = await call(gw, route.method, target, route.method === "POST" ? { headers: { "content-type": "application/json" }, body: "{}" } : {})
      const where = `${route.method} ${target} -> ${r.status} ${r.text.slice(0, 200)}`
      expect(r.status, where).not.toBe(405)
      expect(r.text, where).not.toContain("No route for")
    }
    // the check can tell: a path no route serves is the route-not-found answer
    const none = await call(gw, "DELETE", "/v1/responses/x1/nothing")
    expect(none.status).toBe(404)
    expect(none.text).toContain("No route for")
  })
})
