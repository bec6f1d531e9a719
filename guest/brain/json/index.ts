/** The guest's JSON library: the value model, the parser and the writer (one module each) and exact decimal reading. */
export { Json, JsonKind, kindName } from "./value"
export { decimalToF64 } from "./decimal"
export { MAX_DEPTH, Members, ParseResult, parse, parseBytes, parseElementsWhere, parseMembers } from "./parse"
export { jsonLength, Utf8Writer, stringify, stringifyBytes, writeJson, writeString, writeStringBytes } from "./write"
