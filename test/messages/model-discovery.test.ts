/**
 * Model discovery that clients can use (issue 26). `/v1/models` in both shapes (and Gemini's list)
 * names what a glob alias routes among its provider's declared models, under the names clients
 * send, with `display_name` from a model's `label`; `allowedModels` holds; every listed id answers
 * a model request. Claude Code with `CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1` keeps the ids
 * beginning with `claude` or `anthropic`: it must cache every routed claude id.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { messageJson, messageSse, startFakeMessagesUpstream, type FakeMessagesUpstream } from "../support/FakeMessagesUpstream.js"
import { describeClaudeCodeRun, disposeAllClaudeCode, runClaudeCode } from "../support/ClaudeCode.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-discovery-all"
const HAIKU_KEY = "sk-discovery-haiku"

let native: FakeMessagesUpstream
let gateway: TestGateway

beforeAll(async () => {
  native = await startFakeMessagesUpstream()
  native.onRequest((req) => {
    const body = req.body as { model?: unknown; stream?: unknown }
    const answer = { model: String(body.model), blocks: [{ type: "text" as const, text: "ok" }] }
    return body.stream === true ? messageSse(answer) : messageJson(answer)
  })
  gateway = await startGateway({
    keys: [
      { key: KEY, app: "everything" },
      { key: HAIKU_KEY, app: "haiku-only" }
    ],
    providers: {
      ant: {
        type: "anthropic",
        baseUrl: native.url,
        apiKey: "upstream-key",
        models: {
          "claude-opus-4-8": { label: "Claude Opus 4.8", contextLimit: 1000000 },
          "claude-haiku-4-5": { label: "Claude Haiku 4.5" },
          "claude-sonnet-4-6": {},
          "mistral-large": {}
        }
      }
    },
    aliases: {
      "claude-*": "ant/claude-*",
      // an exact alias takes its own name: listed once, as the alias
      "claude-sonnet-4-6": "ant/claude-haiku-4-5",
      "anthropic-*": { targets: ["ant/claude-*"] }
    },
    apps: { "haiku-only": { allowedModels: ["ant/claude-haiku-*"] } }
  })
})

afterEach(async () => {
  await disposeAllClaudeCode()
})

afterAll(async () => {
  await gateway?.close()
  await native?.close()
})

const get = async (pathname: string, key: string, headers: Record<string, string> = {}) => {
  const response = await fetch(`${gateway.url}${pathname}`, { headers: { authorization: `Bearer ${key}`, ...headers } })
  return { status: response.status, body: (await response.json()) as Record<string, unknown> }
}

type MessagesModel = { id: string; display_name: string; type: string }

describe("model lists name what glob aliases route", () => {
  it("the Messages shape lists each declared model a glob routes, under the client's name, with its label", async () => {
    const { status, body } = await get("/v1/models?limit=1000", KEY, { "anthropic-version": "2023-06-01" })
    expect(status).toBe(200)
    const data = body.data as Array<MessagesModel>
    const byId = new Map(data.map((m) => [m.id, m.display_name]))
    expect(byId.get("claude-opus-4-8")).toBe("Claude Opus 4.8")
    expect(byId.get("claude-haiku-4-5")).toBe("Claude Haiku 4.5")
    // the exact alias keeps its name and shows its target's label
    expect(byId.get("claude-sonnet-4-6")).toBe("Claude Haiku 4.5")
    expect(byId.get("anthropic-opus-4-8")).toBe("Claude Opus 4.8")
    // a declared model no glob routes is listed by its provider id only
    expect(byId.has("mistral-large")).toBe(false)
    expect(byId.get("ant/mistral-large")).toBe("ant/mistral-large")
    // each id once
    expect(new Set(data.map((m) => m.id)).size).toBe(data.length)
  })

  it("the OpenAI shape and Gemini's list carry the same ids", async () => {
    const openai = await get("/v1/models", KEY)
    const ids = (openai.body.data as Array<{ id: string }>).map((m) => m.id)
    expect(ids).toEqual(expect.arrayContaining(["claude-opus-4-8", "claude-haiku-4-5", "claude-sonnet-4-6", "anthropic-haiku-4-5"]))
    const gemini = await get("/v1beta/models", KEY)
    const models = gemini.body.models as Array<{ name: string; displayName: string; inputTokenLimit?: number }>
    expect(models.find((m) => m.name === "models/claude-opus-4-8")).toMatchObject({ displayName: "Claude Opus 4.8", inputTokenLimit: 1000000 })
    const one = await get("/v1beta/models/claude-haiku-4-5", KEY)
    expect(one.body).toMatchObject({ name: "models/claude-haiku-4-5", displayName: "Claude Haiku 4.5" })
  })

  it("allowedModels holds: an app allowed the haiku models lists only those", async () => {
    const { body } = await get("/v1/models?limit=1000", HAIKU_KEY, { "anthropic-version": "2023-06-01" })
    const ids = (body.data as Array<MessagesModel>).map((m) => m.id).sort()
    expect(ids).toEqual(["ant/claude-haiku-4-5", "anthropic-haiku-4-5", "claude-haiku-4-5", "claude-sonnet-4-6"])
  })

  it("every listed id answers a model request, reaching the model it names", async () => {
    const { body } = await get("/v1/models?limit=1000", KEY, { "anthropic-version": "2023-06-01" })
    const expected: Record<string, string> = {
      "claude-opus-4-8": "claude-opus-4-8",
      "claude-haiku-4-5": "claude-haiku-4-5",
      "claude-sonnet-4-6": "claude-haiku-4-5",
      "anthropic-sonnet-4-6": "claude-sonnet-4-6",
      "ant/mistral-large": "mistral-large"
    }
    for (const { id } of body.data as Array<MessagesModel>) {
      const before = native.requests.length
      const response = await fetch(`${gateway.url}/v1/messages`, {
        method: "POST",
        headers: { "x-api-key": KEY, "anthropic-version": "2023-06-01", "content-type": "application/json" },
        body: JSON.stringify({ model: id, max_tokens: 16, messages: [{ role: "user", content: "hi" }] })
      })
      const text = await response.text()
      expect(response.status, `${id}: ${text}`).toBe(200)
      expect(native.requests.length, id).toBe(before + 1)
      const upstreamModel = (native.requests[before].body as { model: string }).model
      if (expected[id] !== undefined) expect(upstreamModel, id).toBe(expected[id])
    }
  })
})

describe("Claude Code's gateway model discovery", () => {
  it("caches every routed claude id with its label", async () => {
    const configDir = fs.mkdtempSync(path.join(os.tmpdir(), "claude-config-"))
    const run = await runClaudeCode({
      baseUrl: gateway.url,
      apiKey: KEY,
      prompt: "Say ok",
      model: "claude-haiku-4-5",
      env: { CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY: "1", CLAUDE_CONFIG_DIR: configDir },
      // discovery is "non-essential traffic" to Claude Code: it stays off while that is disabled
      omitEnv: ["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"]
    })
    try {
      expect(run.exitCode, describeClaudeCodeRun(run)).toBe(0)
      const cache = JSON.parse(fs.readFileSync(path.join(configDir, "cache", "gateway-models.json"), "utf8")) as {
        baseUrl: string
        models: Array<{ id: string; display_name?: string }>
      }
      expect(cache.baseUrl).toBe(gateway.url)
      const cached = new Map(cache.models.map((m) => [m.id, m.display_name]))
      expect([...cached.keys()].sort()).toEqual([
        "anthropic-haiku-4-5",
        "anthropic-opus-4-8",
        "anthropic-sonnet-4-6",
        "claude-haiku-4-5",
        "claude-opus-4-8",
        "claude-sonnet-4-6"
      ])
      expect(cached.get("claude-opus-4-8")).toBe("Claude Opus 4.8")
    } finally {
      await run.dispose()
      fs.rmSync(configDir, { recursive: true, force: true })
    }
  })
})
