/**
 * The tools the tool scenarios of `@modelcontextprotocol/conformance` 0.1.16 call by name, each as
 * its scenario describes it (the suite's own reference server is not in its npm package). Served
 * by a `McpTestServer` behind the gateway, they show that what a server answers reaches an MCP
 * client of `/mcp` as it was sent: text, image, audio, embedded resources, mixed content, an
 * error result, progress, and a JSON Schema 2020-12 input schema kept whole.
 */
import type { TestTool } from "./McpTestServer.js"

/** A 1x1 red PNG. */
const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
/** A WAV header with no samples. */
const WAV = Buffer.from("RIFF$\u0000\u0000\u0000WAVEfmt \u0010\u0000\u0000\u0000\u0001\u0000\u0001\u0000D\u00ac\u0000\u0000\u0088X\u0001\u0000\u0002\u0000\u0010\u0000data\u0000\u0000\u0000\u0000", "latin1").toString("base64")

const noArguments = { type: "object" as const, properties: {} }

export const conformanceTools: ReadonlyArray<TestTool> = [
  {
    tool: { name: "test_simple_text", description: "Returns simple text", inputSchema: noArguments },
    run: () => ({ content: [{ type: "text", text: "This is a simple text response for testing." }] })
  },
  {
    tool: { name: "test_image_content", description: "Returns an image", inputSchema: noArguments },
    run: () => ({ content: [{ type: "image", data: PNG, mimeType: "image/png" }] })
  },
  {
    tool: { name: "test_audio_content", description: "Returns audio", inputSchema: noArguments },
    run: () => ({ content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }] })
  },
  {
    tool: { name: "test_embedded_resource", description: "Returns an embedded resource", inputSchema: noArguments },
    run: () => ({ content: [{ type: "resource", resource: { uri: "test://embedded-resource", mimeType: "text/plain", text: "This is an embedded resource content." } }] })
  },
  {
    tool: { name: "test_multiple_content_types", description: "Returns text, an image and a resource", inputSchema: noArguments },
    run: () => ({
      content: [
        { type: "text", text: "Multiple content types test:" },
        { type: "image", data: PNG, mimeType: "image/png" },
        { type: "resource", resource: { uri: "test://mixed-content-resource", mimeType: "application/json", text: JSON.stringify({ test: "data", value: 123 }) } }
      ]
    })
  },
  {
    tool: { name: "test_error_handling", description: "Always fails", inputSchema: noArguments },
    run: () => ({ content: [{ type: "text", text: "This tool intentionally returns an error for testing" }], isError: true })
  },
  {
    tool: { name: "test_tool_with_progress", description: "Reports progress 0, 50, 100 of 100", inputSchema: noArguments },
    run: async (_args, run) => {
      for (const step of [0, 50, 100]) await run.progress(step, 100)
      return { content: [{ type: "text", text: "Progress test completed" }] }
    }
  },
  {
    tool: {
      name: "json_schema_2020_12_tool",
      description: "Tool with JSON Schema 2020-12 features",
      inputSchema: {
        $schema: "https://json-schema.org/draft/2020-12/schema",
        type: "object",
        $defs: { address: { type: "object", properties: { street: { type: "string" }, city: { type: "string" } } } },
        properties: { name: { type: "string" }, address: { $ref: "#/$defs/address" } },
        additionalProperties: false
      }
    },
    run: () => ({ content: [{ type: "text", text: "ok" }] })
  }
]
