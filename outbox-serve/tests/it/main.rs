//! The admin API and console, end to end: every route on SQLite and PostgreSQL, the
//! authentication and tenant matrix, enqueue over HTTP, bad input, the OpenAPI document, and a real headless
//! Chromium session.

mod api;
mod attempts;
mod audit;
mod auth;
mod browser;
mod browser_console;
mod cancel;
mod common;
mod connections;
mod console;
mod consumers;
mod down_console;
mod event_types;
mod headers;
mod limiter;
mod messages;
mod openapi;
mod rotation;
mod sessions;
