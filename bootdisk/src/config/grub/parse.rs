//! grub.cfg tokens to statements: commands, `{ }` blocks (menuentry, submenu, function) and
//! `if`/`elif`/`else`/`fi`. Loops (`while`, `until`, `for` ... `do` ... `done`) are parsed and
//! dropped. Nesting is bounded by [`Limits::max_nesting`]; an unterminated block ends at the end
//! of the file (lenient).
//!
//! [`Limits::max_nesting`]: crate::Limits::max_nesting

use super::lexer::{Token, Word};
use crate::LimitError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stmt {
    Cmd(Vec<Word>),
    /// `head... { body }`.
    Block {
        head: Vec<Word>,
        body: Vec<Stmt>,
    },
    /// `if c1; then b1; elif c2; then b2; else b3; fi`.
    If {
        arms: Vec<(Vec<Word>, Vec<Stmt>)>,
        otherwise: Vec<Stmt>,
    },
}

/// How a statement sequence ended.
enum End {
    Keyword(String),
    RBrace,
    Eof,
}

pub(crate) struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    max_depth: usize,
}

impl Parser {
    pub(crate) fn new(tokens: Vec<Token>, max_depth: usize) -> Self {
        Self {
            tokens,
            pos: 0,
            max_depth,
        }
    }

    pub(crate) fn parse(mut self) -> Result<Vec<Stmt>, LimitError> {
        let mut all = Vec::new();
        loop {
            let (mut stmts, end) = self.seq(0, &[])?;
            all.append(&mut stmts);
            // A stray `}` or keyword at the top level is skipped.
            if matches!(end, End::Eof) {
                return Ok(all);
            }
        }
    }

    fn skip_ends(&mut self) {
        while matches!(self.tokens.get(self.pos), Some(Token::End)) {
            self.pos += 1;
        }
    }

    /// The words up to the end of the command, and the token that ended it (not consumed
    /// unless it is an `End`).
    fn words(&mut self) -> (Vec<Word>, Option<Token>) {
        let mut out = Vec::new();
        while let Some(t) = self.tokens.get(self.pos) {
            match t {
                Token::Word(w) => out.push(w.clone()),
                Token::End => {
                    self.pos += 1;
                    return (out, Some(Token::End));
                }
                t => return (out, Some(t.clone())),
            }
            self.pos += 1;
        }
        (out, None)
    }

    /// Consumes a `then` / `do` keyword if it comes next.
    fn keyword(&mut self, kw: &str) {
        self.skip_ends();
        if let Some(Token::Word(w)) = self.tokens.get(self.pos) {
            if w.literal().as_deref() == Some(kw) {
                self.pos += 1;
            }
        }
    }

    fn seq(&mut self, depth: usize, stop: &[&str]) -> Result<(Vec<Stmt>, End), LimitError> {
        LimitError::check("grub nesting", depth as u64, self.max_depth as u64)?;
        let mut out = Vec::new();
        loop {
            self.skip_ends();
            let first = match self.tokens.get(self.pos) {
                None => return Ok((out, End::Eof)),
                Some(Token::RBrace) => {
                    self.pos += 1;
                    return Ok((out, End::RBrace));
                }
                Some(Token::LBrace) => {
                    // A bare `{`: parse its body and keep it inline.
                    self.pos += 1;
                    let (mut body, _) = self.seq(depth + 1, &[])?;
                    out.append(&mut body);
                    continue;
                }
                Some(Token::End) => {
                    self.pos += 1;
                    continue;
                }
                Some(Token::Word(w)) => w.literal(),
            };
            if let Some(kw) = first.as_deref().filter(|k| stop.contains(k)) {
                self.pos += 1;
                return Ok((out, End::Keyword(kw.to_string())));
            }
            match first.as_deref() {
                Some("if") => {
                    self.pos += 1;
                    out.push(self.if_stmt(depth)?);
                }
                Some("while" | "until" | "for") => {
                    self.pos += 1;
                    let _ = self.words();
                    self.keyword("do");
                    let _ = self.seq(depth + 1, &["done"])?;
                }
                _ => {
                    let (words, end) = self.words();
                    match end {
                        Some(Token::LBrace) => {
                            self.pos += 1;
                            let (body, _) = self.seq(depth + 1, &[])?;
                            out.push(Stmt::Block { head: words, body });
                        }
                        Some(Token::RBrace) => {
                            out.push(Stmt::Cmd(words));
                            self.pos += 1;
                            return Ok((out, End::RBrace));
                        }
                        _ => out.push(Stmt::Cmd(words)),
                    }
                }
            }
        }
    }

    fn if_stmt(&mut self, depth: usize) -> Result<Stmt, LimitError> {
        let mut arms = Vec::new();
        let mut otherwise = Vec::new();
        let (mut cond, _) = self.words();
        loop {
            self.keyword("then");
            let (body, end) = self.seq(depth + 1, &["elif", "else", "fi"])?;
            arms.push((cond, body));
            match end {
                End::Keyword(k) if k == "elif" => cond = self.words().0,
                End::Keyword(k) if k == "else" => {
                    let (body, _) = self.seq(depth + 1, &["fi"])?;
                    otherwise = body;
                    break;
                }
                End::RBrace => {
                    // An `if` left open inside a block: the block ends here.
                    self.pos = self.pos.saturating_sub(1);
                    break;
                }
                _ => break,
            }
        }
        Ok(Stmt::If { arms, otherwise })
    }
}
