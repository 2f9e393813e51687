// TeX math in answers, typeset by KaTeX: inline `$…$` and `\(…\)`, display
// `$$…$$` and `\[…\]` (as a block of its own or inside a line). Marked
// extensions, so code spans and code blocks (tokenized by marked first) are
// never read as math.
//
// Two things shape this file:
// - Prices are not math. The usual rule (Pandoc's): an opening `$` has no
//   space after it, a closing `$` no space before it and no digit after it,
//   so "$5 and $10" stays text.
// - The page's CSP allows no inline style attributes, and KaTeX positions
//   its HTML with them (struts, fraction bars, superscripts). Sanitizing
//   moves a style that KaTeX wrote into `data-math-style`, and
//   applyMathStyles sets it back through the CSSOM (which the CSP does not
//   govern) once the HTML is in the page.
import katex from 'katex';
import 'katex/dist/katex.min.css';
import './math.css';
import type { TokenizerAndRendererExtension, Tokens } from 'marked';

interface MathToken extends Tokens.Generic {
  type: 'math' | 'mathBlock';
  raw: string;
  text: string;
  display: boolean;
}

function escapeHtml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

/** KaTeX's HTML for `tex`; on a TeX error (or anything KaTeX throws) the
 * source as written, so a bad formula or one still streaming never breaks
 * the message. */
export function renderMath(tex: string, display: boolean, raw: string): string {
  try {
    // trust: false (KaTeX's default) keeps \href, \htmlStyle and friends off;
    // maxExpand bounds macro loops a model could write.
    return katex.renderToString(tex, { displayMode: display, throwOnError: true, strict: false, output: 'htmlAndMathml', maxExpand: 1000 });
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    return `<span class="math-error" title="${escapeHtml(why)}">${escapeHtml(raw)}</span>`;
  }
}

// A formula may span lines but never a blank line (TeX refuses one too), so
// an unclosed `$$` cannot swallow the rest of the answer.
const BODY = String.raw`((?:(?!\n[ \t]*\n)[\s\S])+?)`;

const INLINE: { re: RegExp; display: boolean }[] = [
  { re: new RegExp(String.raw`^\$\$` + BODY + String.raw`\$\$`), display: true },
  { re: new RegExp(String.raw`^\\\[` + BODY + String.raw`\\\]`), display: true },
  { re: new RegExp(String.raw`^\\\(` + BODY + String.raw`\\\)`), display: false },
  // `$x$`: no space after the opening `$`, none before the closing one, no
  // digit after it; `\$` inside is an escaped dollar, not the end.
  { re: /^\$(?![\s$])((?:\\[\s\S]|[^\\$])*?(?:\\[\s\S]|[^\\$\s]))\$(?!\d)/, display: false },
];

const BLOCK: RegExp[] = [
  new RegExp(String.raw`^ {0,3}\$\$` + BODY + String.raw`\$\$[ \t]*(?:\n+|$)`),
  new RegExp(String.raw`^ {0,3}\\\[` + BODY + String.raw`\\\][ \t]*(?:\n+|$)`),
];

const mathInline: TokenizerAndRendererExtension = {
  name: 'math',
  level: 'inline',
  start(src) {
    const i = src.search(/\$|\\[([]/);
    return i < 0 ? undefined : i;
  },
  tokenizer(src) {
    for (const { re, display } of INLINE) {
      const m = re.exec(src);
      if (m) return { type: 'math', raw: m[0], text: m[1].trim(), display } satisfies MathToken;
    }
    return undefined;
  },
  renderer(token) {
    const t = token as MathToken;
    return `<span class="math ${t.display ? 'math-display' : 'math-inline'}">${renderMath(t.text, t.display, t.raw)}</span>`;
  },
};

const mathBlock: TokenizerAndRendererExtension = {
  name: 'mathBlock',
  level: 'block',
  start(src) {
    const i = src.search(/^ {0,3}(?:\$\$|\\\[)/m);
    return i < 0 ? undefined : i;
  },
  tokenizer(src) {
    for (const re of BLOCK) {
      const m = re.exec(src);
      if (m) return { type: 'mathBlock', raw: m[0], text: m[1].trim(), display: true } satisfies MathToken;
    }
    return undefined;
  },
  renderer(token) {
    const t = token as MathToken;
    return `<div class="math math-display">${renderMath(t.text, true, t.raw.trim())}</div>\n`;
  },
};

/** The marked extensions that read math (block first, so a `$$` line opens a display block). */
export const mathExtensions = [mathBlock, mathInline];

/** DOMPurify hook: keeps KaTeX's layout styles as data (see the top of the file). */
export function keepMathStyle(node: Element): void {
  const style = node.getAttribute?.('style');
  if (style && node.closest('.katex')) node.setAttribute('data-math-style', style);
}

/** Sets the styles kept by keepMathStyle through the CSSOM, once `root` is in the page. */
export function applyMathStyles(root: Element): void {
  for (const el of root.querySelectorAll<HTMLElement>('[data-math-style]')) {
    for (const decl of (el.dataset.mathStyle ?? '').split(';')) {
      const colon = decl.indexOf(':');
      if (colon < 0) continue;
      const value = decl.slice(colon + 1).trim();
      // KaTeX writes lengths and colours; anything that could fetch is dropped.
      if (/url\(|image-set\(|@import|\\/i.test(value)) continue;
      el.style.setProperty(decl.slice(0, colon).trim(), value);
    }
    el.removeAttribute('data-math-style');
  }
}
