// Model output is untrusted: Markdown → HTML through marked, code blocks
// highlighted by highlight.js, TeX math typeset by KaTeX (math.ts), and the result sanitized by DOMPurify before
// it touches the DOM. A streaming reply is rendered block by block
// (MarkdownBlocks): blocks that did not change keep their DOM, so the cost
// of an update stays flat however long the answer grows.
import { copyWithFeedback } from './copyFeedback';
import DOMPurify from 'dompurify';
import { Marked, type Token } from 'marked';
// highlight.js's "common" set: the ~36 languages people ask about most
// (Rust, Python, TypeScript, Swift, Kotlin, SQL, YAML, shell, …), with
// their usual aliases (rs, py, ts, sh, html, …).
import hljs from 'highlight.js/lib/common';
import { applyMathStyles, keepMathStyle, mathExtensions } from './math';

function escapeHtml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

const marked = new Marked({
  extensions: mathExtensions,
  gfm: true,
  breaks: true,
  renderer: {
    code({ text, lang }) {
      const language = (lang ?? '').trim().split(/\s+/)[0].toLowerCase();
      const known = language && hljs.getLanguage(language);
      const body = known ? hljs.highlight(text, { language, ignoreIllegals: true }).value : escapeHtml(text);
      const label = known ? language : language ? escapeHtml(language) : 'text';
      return `<div class="code-block"><div class="code-head"><span class="code-lang">${label}</span><button class="copy-code" type="button">Copy</button></div><pre><code class="hljs">${body}</code></pre></div>`;
    },
    // raw HTML in model output is shown as text, not interpreted
    html({ text }) {
      return escapeHtml(text);
    },
  },
});

const SANITIZE = {
  FORBID_TAGS: ['style', 'form', 'input', 'textarea', 'iframe', 'img'],
  FORBID_ATTR: ['style'],
  // KaTeX's MathML (read by screen readers, copied as TeX) keeps its TeX
  // source in <semantics><annotation>, which DOMPurify drops by default.
  ADD_TAGS: ['semantics', 'annotation'],
};

export function renderMarkdown(source: string): string {
  return DOMPurify.sanitize(marked.parse(source, { async: false }) as string, SANITIZE);
}

function wireCopyButtons(el: HTMLElement): void {
  for (const button of el.querySelectorAll<HTMLButtonElement>('button.copy-code')) {
    button.addEventListener('click', () => {
      const code = button.closest('.code-block')?.querySelector('code')?.textContent ?? '';
      void copyWithFeedback(button, code);
    });
  }
}

/** Puts rendered Markdown into `el` and wires its copy buttons. */
export function setMarkdown(el: HTMLElement, source: string): void {
  el.innerHTML = renderMarkdown(source);
  applyMathStyles(el);
  wireCopyButtons(el);
}

/** Markdown that grows (a streaming reply) rendered into `el` one top-level
 * block at a time: each update lexes the text (cheap) and rebuilds only the
 * blocks from the first one whose source changed — while streaming, that is
 * the last block alone. */
export class MarkdownBlocks {
  private blocks: { raw: string; el: HTMLElement }[] = [];
  /** Blocks rendered since creation (for the tests: what an update cost). */
  rendered = 0;

  constructor(readonly el: HTMLElement) {}

  update(source: string): void {
    const tokens = marked.lexer(source);
    const blocks = tokens.filter((t) => t.type !== 'space');
    let same = 0;
    while (same < this.blocks.length && same < blocks.length && this.blocks[same].raw === blocks[same].raw) same++;
    for (const stale of this.blocks.splice(same)) stale.el.remove();
    for (const token of blocks.slice(same)) {
      const el = document.createElement('div');
      el.className = 'md-block';
      el.innerHTML = DOMPurify.sanitize(this.renderBlock(token, tokens.links), SANITIZE);
      applyMathStyles(el);
      wireCopyButtons(el);
      this.el.append(el);
      this.blocks.push({ raw: token.raw, el });
      this.rendered++;
    }
  }

  private renderBlock(token: Token, links: ReturnType<typeof marked.lexer>['links']): string {
    const list = Object.assign([token], { links });
    return marked.parser(list);
  }
}

DOMPurify.addHook('beforeSanitizeAttributes', keepMathStyle);
// Links in answers open nowhere inside the app window.
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});
