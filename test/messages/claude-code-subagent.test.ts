/**
 * The real Claude Code with a subagent, through the gateway (issue 26): its usage rows share the
 * run's session, and the subagent's calls name their agent and parent. The scripted native
 * upstream asks the main agent to run its `Agent` tool; the subagent's conversation opens with the
 * task's prompt, which is how the upstream tells the two apart.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { messageJson, messageSse, startFakeMessagesUpstream, type FakeMessagesUpstream, type RecordedRequest } from "../support/FakeMessagesUpstream.js"
import { describeClaudeCodeRun, disposeAllClaudeCode, runClaudeCode } from "../support/ClaudeCode.js"
import { ADMIN, get, parse, pollUntil } from "../gateway/helpers.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-claude-code-subagent"
const TASK = "SUBAGENT-TASK: reply with the word done."

type Block = { type: string; text?: string; [key: string]: unknown }
type Body = { stream?: boolean; messages: Array<{ role: string; content: string | Array<Block> }>; tools?: Array<{ name: string }> }

const textOf = (content: string | Array<Block>): string => (typeof content === "string" ? content : content.map((b) => (b.type === "text" ? (b.text ?? "") : "")).join(""))

let native: FakeMessagesUpstream
let gateway: TestGateway

const answer = (req: RecordedRequest) => {
  const body = req.body as Body
  const reply = (blocks: Parameters<typeof messageSse>[0]) => (body.stream === true ? messageSse(blocks) : messageJson(blocks))
  const firstUser = body.messages.find((m) => m.role === "user")
  const last = body.messages[body.messages.length - 1]
  const lastIsResult = Array.isArray(last.content) && last.content.some((b) => b.type === "tool_result")
  const main = (body.tools ?? []).some((t) => t.name === "Agent")
  if (firstUser !== undefined && textOf(firstUser.content).includes(TASK)) return reply({ blocks: [{ type: "text", text: "done" }] })
  if (main && !lastIsResult) {
    return reply({ blocks: [{ type: "tool_use", id: "toolu_agent_1", name: "Agent", input: { description: "Run the task", prompt: TASK, subagent_type: "general-purpose" } }] })
  }
  return reply({ blocks: [{ type: "text", text: "The subagent said done." }] })
}

beforeAll(async () => {
  native = await startFakeMessagesUpstream()
  native.onRequest(answer)
  gateway = await startGateway({
    adminKey: ADMIN,
    keys: [{ key: KEY, app: "claude-code" }],
    providers: { ant: { type: "anthropic", baseUrl: native.url, apiKey: "upstream-key" } },
    aliases: { "claude-*": "ant/claude-*" }
  })
})

afterEach(async () => {
  await disposeAllClaudeCode()
})

afterAll(async () => {
  await gateway?.close()
  await native?.close()
})

type SessionReport = {
  topSessions: Array<{ session: string; requests: number }>
  agents?: Array<{ agent: string | null; parentAgent: string | null; requests: number }>
  totals: { requests: number }
}

describe("Claude Code with a subagent", () => {
  it("its usage rows share one session; the subagent's name their agent", async () => {
    const run = await runClaudeCode({ baseUrl: gateway.url, apiKey: KEY, prompt: "Use a subagent to run the task.", model: "claude-haiku-4-5", timeoutMs: 120_000 })
    try {
      expect(run.exitCode, describeClaudeCodeRun(run)).toBe(0)
      expect(run.resultText).toBe("The subagent said done.")
      const calls = native.requests.length
      // the subagent ran: its conversation reached the upstream
      expect(native.requests.some((r) => textOf((r.body as Body).messages[0].content).includes(TASK))).toBe(true)

      // every call of the run is recorded (usage rows are written in batches about a second apart)
      const wide = parse(await pollUntil(() => get(gateway, "/gateway/usage", ADMIN), (r) => (parse(r) as unknown as SessionReport).totals.requests >= calls, 10_000, 50)) as unknown as SessionReport
      expect(wide.totals.requests).toBe(calls)
      expect(wide.topSessions).toHaveLength(1)
      const session = wide.topSessions[0]
      expect(session.requests).toBe(calls)

      const report = parse(await get(gateway, `/gateway/usage?session=${encodeURIComponent(session.session)}`, ADMIN)) as unknown as SessionReport
      const agents = report.agents ?? []
      const main = agents.find((a) => a.agent === null)
      const sub = agents.filter((a) => a.agent !== null)
      expect(main?.requests, JSON.stringify(agents)).toBeGreaterThanOrEqual(2)
      expect(sub, JSON.stringify(agents)).toHaveLength(1)
      expect(sub[0].requests).toBeGreaterThanOrEqual(1)
      // Claude Code 2.1.197 sends x-claude-code-parent-agent-id only below another subagent: a task of the main agent has none
      expect(sub[0].parentAgent).toBeNull()
      expect(agents.reduce((n, a) => n + a.requests, 0)).toBe(calls)
    } finally {
      await run.dispose()
    }
  })
})
