import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { isModelMethod, parseModelAction, parseModelName } from "../../../src/protocols/gemini/Path.js"

describe("Gemini model paths", () => {
  it("reads the forms of 4.3", () => {
    expect(parseModelAction("/v1beta/models/fast:generateContent")).toEqual({ model: "fast", method: "generateContent" })
    expect(parseModelAction("/v1beta/models/openai/gpt-5:streamGenerateContent")).toEqual({ model: "openai/gpt-5", method: "streamGenerateContent" })
    expect(parseModelAction("/v1beta/models/openai%2Fgpt-5%23high:countTokens")).toEqual({ model: "openai/gpt-5#high", method: "countTokens" })
    expect(parseModelAction("/v1beta/models/models%2Fopenai%2Fgpt-5:generateContent")).toEqual({ model: "openai/gpt-5", method: "generateContent" })
    expect(parseModelAction("/v1beta/models/models/fast:generateContent")).toEqual({ model: "fast", method: "generateContent" })
    // an id with a colon: only the text after the last one is the method
    expect(parseModelAction("/v1beta/models/ollama/llama3:8b:generateContent")).toEqual({ model: "ollama/llama3:8b", method: "generateContent" })
    expect(parseModelAction("/v1beta/models/fast:embedContent")).toEqual({ model: "fast", method: "embedContent" })
    expect(isModelMethod("embedContent")).toBe(false)
    expect(isModelMethod("streamGenerateContent")).toBe(true)
  })

  it("refuses what is not a model action", () => {
    for (const path of ["/v1beta/models/", "/v1beta/models/fast", "/v1beta/models/:generateContent", "/v1beta/models/fast:", "/v1beta/models/%E0%A4%A:generateContent", "/v1beta/other/x:generateContent"]) {
      expect(parseModelAction(path), path).toBeUndefined()
    }
  })

  it("names one model for GET, keeping colons and dropping models/", () => {
    expect(parseModelName("/v1beta/models/models%2Fopenai%2Fgpt-5")).toBe("openai/gpt-5")
    expect(parseModelName("/v1beta/models/ollama/llama3:8b")).toBe("ollama/llama3:8b")
    expect(parseModelName("/v1beta/models/")).toBeUndefined()
  })

  it("round-trips any encoded id and method", () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 40 }).filter((s) => !s.startsWith("models/")),
        fc.constantFrom("generateContent", "streamGenerateContent", "countTokens"),
        fc.boolean(),
        (model, method, withPrefix) => {
          const path = `/v1beta/models/${encodeURIComponent(`${withPrefix ? "models/" : ""}${model}`)}:${method}`
          expect(parseModelAction(path)).toEqual({ model, method })
        }
      )
    )
  })
})
