/** DOM helpers: text only ever enters the page as text nodes or attribute values. */
const SVGNS = "http://www.w3.org/2000/svg";

/** the element with this id, of the kind the markup gives it */
const byId = <T extends HTMLElement>(id: string, kind: new () => T): T => {
  const node = document.getElementById(id);
  if (!(node instanceof kind)) throw new TypeError("#" + id + " is missing or not a " + kind.name);
  return node;
};
const $ = (id: string) => byId(id, HTMLElement);
const $input = (id: string) => byId(id, HTMLInputElement);
const $button = (id: string) => byId(id, HTMLButtonElement);
const $select = (id: string) => byId(id, HTMLSelectElement);
const $table = (id: string) => byId(id, HTMLTableElement);
/** the elements under root that match the selector and are of this kind */
const $all = <T extends Element>(root: ParentNode, selector: string, kind: new () => T): Array<T> =>
  [...root.querySelectorAll(selector)].filter((n): n is T => n instanceof kind);

type Child = Node | string | number | null | undefined | false;
type Children = Child | ReadonlyArray<Child>;
type Attrs = Readonly<Record<string, string | number | null | undefined>>;
const isChildList = (c: Children): c is ReadonlyArray<Child> => Array.isArray(c);
const add = <N extends Node>(node: N, children: Children): N => {
  for (const c of isChildList(children) ? children : [children]) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
  return node;
};
const withAttrs = <E extends Element>(node: E, attrs: Attrs | undefined): E => {
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  return node;
};
const el = <K extends keyof HTMLElementTagNameMap>(tag: K, attrs?: Attrs, children?: Children) => add(withAttrs(document.createElement(tag), attrs), children);
const svg = <K extends keyof SVGElementTagNameMap>(tag: K, attrs?: Attrs, children?: Children) => add(withAttrs(document.createElementNS(SVGNS, tag), attrs), children);

const show = (node: HTMLElement, on: boolean) => { node.hidden = !on; };
const setError = (node: HTMLElement, error: ApiError | null) => {
  node.replaceChildren();
  if (!error) return show(node, false);
  add(node, [el("strong", {}, error.detail), " ", el("span", { class: "small" }, "(" + [error.code, error.status ? "HTTP " + error.status : null].filter(Boolean).join(", ") + ")")]);
  show(node, true);
};
