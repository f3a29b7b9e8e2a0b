// Whether HTML is plain formatting only: text without markup, and tags
// from a short list of formatting elements written without attributes.
// Such HTML cannot run script, load anything or carry a URL, so the
// Markdown renderer (markdown.ts) shows it without DOMPurify, whose cost
// is mostly a new document per call: most agent messages are prose with
// emphasis and inline code, and a long thread renders hundreds of them.
// Anything else (links, images, code blocks, attributes, any other tag)
// is not plain and is sanitized. Pure: no DOM here, so node --test covers it.

/** One formatting tag, opening or closing, lower case, no attributes, no space. */
const TAG = /<\/?(?:p|br|hr|strong|em|del|code|blockquote|ul|ol|li|h[1-6]|table|thead|tbody|tr|th|td)>/y;

export function plainFormatting(html: string): boolean {
  for (let i = html.indexOf('<'); i !== -1; i = html.indexOf('<', TAG.lastIndex)) {
    TAG.lastIndex = i;
    if (!TAG.test(html)) return false;
  }
  return true;
}
