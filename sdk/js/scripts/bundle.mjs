#!/usr/bin/env node
// One-file ESM build of src/ for a <script type="module"> (no bundler needed): each
// internal module becomes a function scope returning its exports, in dependency order.
// Usage: node scripts/bundle.mjs [OUT]   (prints to stdout without OUT)
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SRC = join(dirname(fileURLToPath(import.meta.url)), '..', 'src');
const IMPORT = /^import \{([^}]*)\} from '\.\/([\w-]+)\.js';\n/gm;
const REEXPORT = /^export \{([^}]*)\} from '\.\/([\w-]+)\.js';\n/gm;
const DECLARED = /^export (?:async )?(?:function\*? |class |const |let )(\w+)/gm;

const names = (list) => list.split(',').map((n) => n.trim()).filter(Boolean);
const scope = (mod) => `__cs_${mod}`;

function load(mod, seen, order) {
  if (seen.has(mod)) return;
  seen.add(mod);
  const text = readFileSync(join(SRC, `${mod}.js`), 'utf8');
  for (const [, , dep] of [...text.matchAll(IMPORT), ...text.matchAll(REEXPORT)]) load(dep, seen, order);
  order.push({ mod, text });
}

function bindings(text) {
  const lines = [];
  for (const [, list, dep] of text.matchAll(IMPORT)) lines.push(`const { ${names(list).join(', ')} } = ${scope(dep)};`);
  return lines.join('\n');
}

function wrap({ mod, text }) {
  const exported = [...text.matchAll(DECLARED)].map((m) => m[1]);
  const body = text.replace(IMPORT, '').replace(/^export (?=(async )?(function|class|const|let) )/gm, '');
  return `const ${scope(mod)} = (() => {\n${bindings(text)}\n${body}\nreturn { ${exported.join(', ')} };\n})();\n`;
}

function entry({ text }) {
  const imported = new Set([...text.matchAll(IMPORT)].flatMap((m) => names(m[1])));
  const reexports = [];
  const extra = [];
  for (const [, list, dep] of text.matchAll(REEXPORT)) {
    for (const name of names(list)) {
      reexports.push(name);
      if (!imported.has(name)) extra.push(`const { ${name} } = ${scope(dep)};`);
    }
  }
  const body = text.replace(IMPORT, '').replace(REEXPORT, '');
  return `${bindings(text)}\n${extra.join('\n')}\n${body}\nexport { ${reexports.join(', ')} };\n`;
}

export function bundle() {
  const order = [];
  load('index', new Set(), order);
  const main = order.pop();
  const version = JSON.parse(readFileSync(join(SRC, '..', 'package.json'), 'utf8')).version;
  return `// cs-sdk ${version}: one-file build of sdk/js/src (scripts/bundle.mjs)\n`
    + order.map(wrap).join('\n') + '\n' + entry(main);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const out = process.argv[2];
  const code = bundle();
  if (!out) process.stdout.write(code);
  else {
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, code);
    console.error(`wrote ${out} (${code.length} bytes)`);
  }
}
