import { spawn } from "node:child_process"

/** Runs a Node script of the project (from its root) to its end: its exit code and its output, stdout and stderr together. */
export const runScript = (script: string, args: ReadonlyArray<string> = []) =>
  new Promise<{ code: number | null; out: string }>((resolve) => {
    const child = spawn(process.execPath, [script, ...args], { stdio: ["ignore", "pipe", "pipe"] })
    let out = ""
    child.stdout.on("data", (d) => void (out += d))
    child.stderr.on("data", (d) => void (out += d))
    child.on("exit", (code) => resolve({ code, out }))
  })
