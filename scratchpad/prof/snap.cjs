process.on("SIGUSR2", () => { global.gc?.(); const f = require("node:v8").writeHeapSnapshot("/tmp/idle.heapsnapshot"); console.error("MEM snapshot " + f) })
