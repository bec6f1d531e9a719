/**
 * An example Wasm tool (dist/loops/examples/echo-tool.wasm): it answers with the input it was
 * called with. A session names it in `tools` with `module: "<its sha256>"` in a `brain`
 * Environment (docs/environments.md); the benchmark harness's Wasm tool loop runs it.
 *
 * `brain_tool` receives `{"input", "call": {"session_id", "sequence", "name", "deadline_at_ms"}}`
 * (docs/abi.md) and returns `{"ok": <output>}`: here the input itself, so the call's outcome is
 * `ok` with the input as its output. A call without an input object answers an error value.
 */
import { readInput, returnErrorValue, returnOk, Json } from "../../guest/brain"

export { brain_abi_v1, brain_alloc } from "../../guest/brain"

export function brain_tool(ptr: usize, len: usize): u64 {
  const request = readInput(ptr, len)
  const input = request.get("input")
  if (input === null) return returnErrorValue(Json.object().set("message", Json.string("the call has no input")))
  return returnOk(input)
}
