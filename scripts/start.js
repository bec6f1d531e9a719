#!/usr/bin/env node
// `npm start`: build only when the build is older than the sources (the guests too), then run the main job.
import { execFileSync, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), "..")
const newest = (dir) => {
  let t = 0
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name)
    t = Math.max(t, e.isDirectory() ? newest(p) : fs.statSync(p).mtimeMs)
  }
  return t
}
// The bundle bin/brain.js runs (scripts/bundle.js) is made from the compiled modules: both are redone together.
const built = path.join(root, "dist", "brain.mjs")
if (!fs.existsSync(built) || fs.statSync(built).mtimeMs < newest(path.join(root, "src"))) {
  execFileSync("npx", ["tsc", "-p", "tsconfig.build.json"], { cwd: root, stdio: "inherit" })
  execFileSync(process.execPath, [path.join(root, "scripts", "bundle.js")], { cwd: root, stdio: "inherit" })
}
const { buildShipped } = await import("./build-guests.js")
await buildShipped({ log: () => {} })
const args = process.argv.slice(2)
// The server's Node flags (src/cli/nodeFlags.ts; bin/brain.js's first line gives the same): a larger young generation, less GC per turn.
const { SERVER_NODE_FLAGS } = await import("../dist/cli/nodeFlags.js")
const child = spawn(process.execPath, [...SERVER_NODE_FLAGS, path.join(root, "bin", "brain.js"), ...(args.length ? args : ["serve"])], {
  stdio: "inherit"
})
// The server drains on SIGTERM/SIGINT: pass them on and wait for it instead of dying first.
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => child.kill(signal))
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)))
