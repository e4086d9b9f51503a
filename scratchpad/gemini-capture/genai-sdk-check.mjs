import http from "node:http"
import { GoogleGenAI } from "@google/genai"
const seen = []
const srv = http.createServer((req, res) => {
  let b = ""; req.on("data", c => b += c); req.on("end", () => {
    const h = { ...req.headers }; if (h["x-goog-api-key"]) h["x-goog-api-key"] = "<redacted>"
    seen.push({ method: req.method, url: req.url, headers: h, body: b ? JSON.parse(b) : undefined })
    const payload = {"candidates":[{"content":{"role":"model","parts":[{"text":"hi"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":2,"totalTokenCount":7},"modelVersion":"x","responseId":"r1"}
    if (req.url.includes("alt=sse")) { res.writeHead(200, {"content-type":"text/event-stream"}); res.end(`data: ${JSON.stringify(payload)}\r\n\r\n`) }
    else { res.writeHead(200, {"content-type":"application/json"}); res.end(JSON.stringify(payload)) }
  })
})
await new Promise(r => srv.listen(0, "127.0.0.1", r))
const ai = new GoogleGenAI({ apiKey: "k-123", httpOptions: { baseUrl: `http://127.0.0.1:${srv.address().port}` } })
const r1 = await ai.models.generateContent({ model: "gemini-2.5-flash", contents: "hello" })
let t = ""; for await (const c of await ai.models.generateContentStream({ model: "gemini-2.5-flash", contents: "hello" })) t += c.text
console.log(JSON.stringify({ text1: r1.text, text2: t, seen }, null, 1))
srv.close()
