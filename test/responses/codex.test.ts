/**
 * The real Codex CLI (`@openai/codex`) through the gateway's Responses API, against a scripted
 * chat-completions upstream on loopback: a plain answer, then one session with a function tool
 * round trip (exec_command) and an apply_patch custom-tool call that really creates a file.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import { chatSse, startFakeUpstream, type FakeUpstream, type RecordedRequest } from "../support/FakeUpstream.js"
import { codexAnswer, describeCodexRun, disposeAllCodex, NO_RETRIES, runCodex } from "../support/Codex.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const KEY = "sk-codex-gateway-key"

interface WireMessage {
  readonly role: string
  readonly content?: unknown
  readonly tool_call_id?: string
  readonly tool_calls?: ReadonlyArray<{ readonly id: string; readonly function: { readonly name: string; readonly arguments: string } }>
}
interface WireTool {
  readonly type: string
  readonly function: { readonly name: string; readonly parameters?: { readonly properties?: Record<string, unknown> } }
}
interface WireBody {
  readonly model: string
  readonly stream?: boolean
  readonly messages: ReadonlyArray<WireMessage>
  readonly tools?: ReadonlyArray<WireTool>
}

const bodyOf = (r: RecordedRequest | undefined): WireBody => r?.body as WireBody
const toolMessages = (body: WireBody) => body.messages.filter((m) => m.role === "tool")
const contentText = (m: WireMessage): string => (typeof m.content === "string" ? m.content : JSON.stringify(m.content))

describe("Codex CLI through the gateway (Responses API)", () => {
  let upstream: FakeUpstream
  let gateway: TestGateway

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    gateway = await startGateway({
      keys: [{ key: KEY, app: "codex" }],
      providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "upstream-key" } },
      // Codex sends the model it knows; the operator maps it with an alias
      aliases: { "gpt-5.5": "up/gpt-test" }
    })
  })
  afterEach(async () => {
    await disposeAllCodex()
    upstream.reset()
  })
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  it("answers a plain prompt", async () => {
    upstream.onRequest(() => chatSse({ content: "Hello from the gateway" }))
    const run = await runCodex({ baseUrl: gateway.url, apiKey: KEY, prompt: "Say hello", provider: NO_RETRIES })
    try {
      expect(run.exitCode, describeCodexRun(run)).toBe(0)
      expect(codexAnswer(run)).toBe("Hello from the gateway")
      expect(upstream.requests).toHaveLength(1)
      const body = bodyOf(upstream.requests[0])
      expect(body.model).toBe("gpt-test")
      expect(body.stream).toBe(true)
      // developer messages became the system prompt; the prompt is the last user message
      expect(body.messages[0].role).toBe("system")
      expect(contentText(body.messages[body.messages.length - 1])).toContain("Say hello")
      const names = (body.tools ?? []).map((t) => t.function.name)
      expect(names).toContain("exec_command")
      // the freeform apply_patch tool is offered as a function with one string argument `input`
      const applyPatch = body.tools?.find((t) => t.function.name === "apply_patch")
      expect(Object.keys(applyPatch?.function.parameters?.properties ?? {})).toEqual(["input"])
      // the hosted web_search tool Codex always sends is left out
      expect(names).not.toContain("web_search")
    } finally {
      await run.dispose()
    }
  }, 60_000)

  it("runs a session with a function tool round trip and an apply_patch call that creates a file", async () => {
    const patch = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch"
    upstream.onRequest((_req, index) => {
      if (index === 0) return chatSse({ toolCalls: [{ id: "call_shell_1", name: "exec_command", arguments: JSON.stringify({ cmd: "echo gateway-roundtrip" }) }] })
      if (index === 1) return chatSse({ toolCalls: [{ id: "call_patch_1", name: "apply_patch", arguments: JSON.stringify({ input: patch }) }] })
      return chatSse({ content: "All done." })
    })
    const run = await runCodex({ baseUrl: gateway.url, apiKey: KEY, prompt: "Echo a marker, then create hello.txt", provider: NO_RETRIES })
    try {
      expect(run.exitCode, describeCodexRun(run)).toBe(0)
      expect(codexAnswer(run)).toBe("All done.")
      expect(upstream.requests).toHaveLength(3)

      // turn 2: the shell call and its output reached the upstream as an assistant call + tool result
      const second = bodyOf(upstream.requests[1])
      const call = second.messages.find((m) => m.tool_calls?.some((c) => c.id === "call_shell_1"))
      expect(call?.tool_calls?.[0].function.name).toBe("exec_command")
      const shellResult = toolMessages(second).find((m) => m.tool_call_id === "call_shell_1")
      expect(shellResult && contentText(shellResult)).toContain("gateway-roundtrip")

      // turn 3: the apply_patch result came back as a tool result too
      const third = bodyOf(upstream.requests[2])
      const patchResult = toolMessages(third).find((m) => m.tool_call_id === "call_patch_1")
      expect(patchResult && contentText(patchResult)).toContain("hello.txt")

      // and the file really exists in Codex's work directory
      expect(fs.readFileSync(path.join(run.workDir, "hello.txt"), "utf8")).toBe("hi\n")
    } finally {
      await run.dispose()
    }
  }, 90_000)
})
