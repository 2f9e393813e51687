// Model output is untrusted: Markdown → HTML through marked, code blocks
// highlighted by highlight.js, and the result sanitized by DOMPurify before
// it touches the DOM.
import DOMPurify from 'dompurify';
import { Marked } from 'marked';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import c from 'highlight.js/lib/languages/c';
import cpp from 'highlight.js/lib/languages/cpp';
import css from 'highlight.js/lib/languages/css';
import go from 'highlight.js/lib/languages/go';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';

for (const [name, lang] of Object.entries({ bash, c, cpp, css, go, java, javascript, json, python, rust, sql, typescript, xml, yaml })) {
  hljs.registerLanguage(name, lang);
}
hljs.registerAliases(['sh', 'shell', 'zsh'], { languageName: 'bash' });
hljs.registerAliases(['js'], { languageName: 'javascript' });
hljs.registerAliases(['ts'], { languageName: 'typescript' });
hljs.registerAliases(['py'], { languageName: 'python' });
hljs.registerAliases(['rs'], { languageName: 'rust' });
hljs.registerAliases(['html'], { languageName: 'xml' });

function escapeHtml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

const marked = new Marked({
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

export function renderMarkdown(source: string): string {
  const html = marked.parse(source, { async: false }) as string;
  return DOMPurify.sanitize(html, {
    FORBID_TAGS: ['style', 'form', 'input', 'textarea', 'iframe', 'img'],
    FORBID_ATTR: ['style'],
  });
}

/** Puts rendered Markdown into `el` and wires its copy buttons. */
export function setMarkdown(el: HTMLElement, source: string): void {
  el.innerHTML = renderMarkdown(source);
  for (const button of el.querySelectorAll<HTMLButtonElement>('button.copy-code')) {
    button.addEventListener('click', () => {
      const code = button.closest('.code-block')?.querySelector('code')?.textContent ?? '';
      void navigator.clipboard?.writeText(code).then(
        () => { button.textContent = 'Copied'; setTimeout(() => (button.textContent = 'Copy'), 1200); },
        () => { button.textContent = 'Copy failed'; },
      );
    });
  }
}

// Links in answers open nowhere inside the app window.
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A') {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});
