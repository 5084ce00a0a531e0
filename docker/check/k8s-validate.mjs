// Validates Kubernetes manifests offline against the Kubernetes API schemas
// that the npm package kubernetes-models ships (JSON schemas generated from
// Kubernetes' OpenAPI document, compiled with ajv): types, required fields,
// enums and formats. The schemas allow unknown fields, as the API server's
// schema does; kubectl refuses them (strict field validation), and so does
// this script: a second pass walks every object against the property list of
// its type, read from the package's TypeScript declarations, generated from
// the same OpenAPI document.
//
// usage: node k8s-validate.mjs NODE_MODULES_DIR MANIFESTS.json
//   MANIFESTS.json: [{"file": "...", "index": N, "doc": {...}}, ...]
// Exit status 0 when every document is valid, 1 otherwise.

import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [nodeModules, manifestsPath] = process.argv.slice(2);
if (!nodeModules || !manifestsPath) {
  console.error("usage: node k8s-validate.mjs NODE_MODULES_DIR MANIFESTS.json");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(nodeModules), "resolve-from-here.js"));
const modelsDir = path.dirname(require.resolve("kubernetes-models"));
const apimachineryDir = path.dirname(require.resolve("@kubernetes-models/apimachinery"));
const modelsVersion = JSON.parse(fs.readFileSync(path.join(modelsDir, "package.json"), "utf8")).version;

// ---- type index from the declarations ------------------------------------

function walk(dir, out = []) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) {
      if (e.name !== "node_modules" && e.name !== "_schemas") walk(p, out);
    } else if (e.name.endsWith(".d.ts")) out.push(p);
  }
  return out;
}

// Reads a balanced {...} starting at text[i] === "{"; returns [body, end].
function balanced(text, i) {
  let depth = 0;
  for (let j = i; j < text.length; j++) {
    const c = text[j];
    if (c === "{") depth++;
    else if (c === "}" && --depth === 0) return [text.slice(i + 1, j), j + 1];
  }
  throw new Error("unbalanced braces");
}

// Splits an interface body into {name: typeString}.
function properties(body) {
  const props = {};
  const clean = body;
  let i = 0;
  while (i < clean.length) {
    const m = /"([^"]+)"\??\s*:/y;
    m.lastIndex = i;
    const hit = m.exec(clean);
    if (!hit) {
      i++;
      continue;
    }
    let j = m.lastIndex;
    let depth = 0;
    for (; j < clean.length; j++) {
      const c = clean[j];
      if ("{<([".includes(c)) depth++;
      else if ("}>)]".includes(c)) depth--;
      else if (c === ";" && depth === 0) break;
    }
    props[hit[1]] = clean.slice(m.lastIndex, j).replace(/\s+/g, " ").trim();
    i = j + 1;
  }
  return props;
}

const interfaces = new Map(); // qualified name -> {prop: type}
const aliases = new Map(); // qualified name -> type string
const byFile = new Map(); // file (without .d.ts) -> qualified name of its main interface

for (const file of [...walk(modelsDir), ...walk(apimachineryDir)]) {
  // Doc comments quote JSON and braces: drop them before counting braces.
  const text = fs.readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
  const local = new Map();
  const localAliases = new Map();
  const iface = /export interface (\w+)(?:\s+extends\s+[^{]+)?\s*\{/g;
  let m;
  while ((m = iface.exec(text))) {
    const [body] = balanced(text, m.index + m[0].length - 1);
    local.set(m[1], properties(body));
  }
  const alias = /export declare type (\w+) = ([^;]+);/g;
  while ((m = alias.exec(text))) localAliases.set(m[1], m[2].trim());
  const exp = /export (?:type )?\{ (\w+) as (\w+),/g;
  while ((m = exp.exec(text))) {
    if (local.has(m[1])) {
      interfaces.set(m[2], local.get(m[1]));
      byFile.set(file.slice(0, -".d.ts".length), m[2]);
    } else if (localAliases.has(m[1])) aliases.set(m[2], localAliases.get(m[1]));
  }
}

// ---- strict walk ----------------------------------------------------------

// Core kinds (apiVersion v1) live in kubernetes-models/v1, the others in
// kubernetes-models/<group>/<version>.
function modelDir(apiVersion) {
  return apiVersion.includes("/") ? apiVersion : "v1";
}

function typeOfKind(apiVersion, kind) {
  return byFile.get(path.join(modelsDir, modelDir(apiVersion), kind));
}

function strict(value, type, where, errors) {
  type = type.trim();
  while (aliases.has(type)) type = aliases.get(type).trim();
  if (value === null || value === undefined) return;
  let m;
  if ((m = /^Array<(.*)>$/s.exec(type))) {
    if (Array.isArray(value)) value.forEach((v, i) => strict(v, m[1], `${where}[${i}]`, errors));
    return;
  }
  if ((m = /^\{ \[key: string\]: (.*); \}$/s.exec(type))) {
    if (typeof value === "object" && !Array.isArray(value))
      for (const [k, v] of Object.entries(value)) strict(v, m[1], `${where}.${k}`, errors);
    return;
  }
  if (/^I\w+$/.test(type)) {
    const props = interfaces.get(type);
    if (!props) {
      errors.push(`${where}: no declaration for type ${type} (the strict check cannot see inside it)`);
      return;
    }
    if (typeof value !== "object" || Array.isArray(value)) return; // the schema pass reports it
    for (const [k, v] of Object.entries(value)) {
      if (!(k in props)) {
        errors.push(`${where}: unknown field "${k}" (${type.replace(/^IIoK8s/, "")} has: ${Object.keys(props).join(", ")})`);
        continue;
      }
      strict(v, props[k], `${where}.${k}`, errors);
    }
  }
  // string, number, boolean, literals, unions, any: leaves.
}

// ---- main ------------------------------------------------------------------

const docs = JSON.parse(fs.readFileSync(manifestsPath, "utf8"));
let failed = 0;
for (const { file, index, doc } of docs) {
  const label = `${file}#${index}`;
  if (!doc || typeof doc !== "object" || !doc.apiVersion || !doc.kind) {
    console.log(`FAIL ${label}: not a Kubernetes object (no apiVersion/kind)`);
    failed++;
    continue;
  }
  const name = `${doc.kind} ${doc.metadata?.name ?? "(no name)"}`;
  const modulePath = `kubernetes-models/${modelDir(doc.apiVersion)}`;
  let Model;
  try {
    Model = require(modulePath)[doc.kind];
  } catch {
    Model = undefined;
  }
  if (!Model) {
    console.log(`FAIL ${label}: ${doc.apiVersion} ${doc.kind}: no such kind in the Kubernetes API schemas`);
    failed++;
    continue;
  }
  const errors = [];
  try {
    new Model(doc).validate();
  } catch (e) {
    errors.push(`schema: ${e.message}`);
  }
  const top = typeOfKind(doc.apiVersion, doc.kind);
  if (!top) errors.push(`no declaration for ${doc.apiVersion} ${doc.kind}`);
  else strict(doc, top, doc.kind, errors);
  if (errors.length) {
    failed++;
    console.log(`FAIL ${label}: ${name}`);
    for (const e of errors) console.log(`     ${e}`);
  } else {
    console.log(`ok   ${label}: ${doc.apiVersion} ${name}`);
  }
}
console.log(
  `k8s-validate: ${docs.length - failed} valid, ${failed} invalid (kubernetes-models ${modelsVersion}, ` +
    `${interfaces.size} types, strict fields)`,
);
process.exit(failed ? 1 : 0);
