import fs from "node:fs"
const s = JSON.parse(fs.readFileSync(process.argv[2], "utf8"))
const f = s.snapshot.meta.node_fields, types = s.snapshot.meta.node_types[0], n = f.length
const ti = f.indexOf("type"), ni = f.indexOf("name")
const c = new Map()
for (let i = 0; i < s.nodes.length; i += n) { if (types[s.nodes[i + ti]] !== "object") continue; const name = s.strings[s.nodes[i + ni]]; c.set(name, (c.get(name) ?? 0) + 1) }
for (const k of ["IncomingMessage", "ServerResponse", "FiberRuntime", "AbortController", "AbortSignal", "Timeout", "Socket", "Request", "RequestHandler", "BodyReadable", "DOMException", "Promise"]) console.log(k, c.get(k) ?? 0)
