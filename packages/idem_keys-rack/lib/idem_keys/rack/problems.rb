# frozen_string_literal: true

require "json"

module IdemKeys
  module Rack
    # The answers the middleware makes itself: application/problem+json (RFC 9457), the same fields in the same
    # order, and the same bytes, as the Go, Python and Node packages (docs/integrations.md, "Problems").
    module Problems
      CONTENT_TYPE = "application/problem+json"

      # RFC 9110's reason phrases, written out: Rack::Utils::HTTP_STATUS_CODES says "Payload Too Large" (413) and
      # "Unprocessable Entity" (422) in Rack 2.
      TITLES = {
        400 => "Bad Request", 409 => "Conflict", 413 => "Content Too Large", 422 => "Unprocessable Content",
        500 => "Internal Server Error", 503 => "Service Unavailable"
      }.freeze

      # code => [status, detail, Retry-After or nil]
      ALL = {
        "key-missing" => [400, "this request needs an Idempotency-Key header", nil],
        "key-malformed" => [400, "the Idempotency-Key must be one field of 1 to 255 characters, bare or as a " \
                                 "quoted string", nil],
        "body-unreadable" => [400, "the request body could not be read", nil],
        "request-in-progress" => [409, "a request with this Idempotency-Key is still running: retry after " \
                                       "Retry-After seconds", 1],
        "lease-lost" => [409, "this request ran past its claim and another request took the key over: retry to " \
                              "get that one's answer", 1],
        "body-too-large" => [413, "the request body is larger than this server accepts; nothing was claimed", nil],
        "key-reused" => [422, "this Idempotency-Key was used with another request", nil],
        "scope-missing" => [500, "the server could not tell whose request this is", nil],
        "store-failed" => [500, "the answer could not be stored: retry later with the same Idempotency-Key", nil],
        "store-unavailable" => [503, "the idempotency store could not be reached: nothing was done", 1],
        "commit-failed" => [503, "the request's changes could not be committed: nothing was done, retry with the " \
                                 "same Idempotency-Key", 1],
        "commit-unknown" => [503, "the request's changes may or may not have been committed: retry with the same " \
                                  "Idempotency-Key to learn which", 1]
      }.freeze

      module_function

      # The exact bytes of the problem's body: compact JSON, as Go's encoding/json and JSON.stringify write it.
      def body(code)
        status, detail, = ALL.fetch(code)
        JSON.generate({ "type" => "about:blank", "title" => TITLES.fetch(status), "status" => status,
                        "detail" => detail, "code" => code })
      end

      # A Rack response for the problem, its header names in lower case (Rack 3). retry_after overrides the
      # problem's own (request-in-progress counts down to the end of the first attempt's lease); extra is more
      # headers (the outcome header).
      def response(code, retry_after: nil, extra: nil)
        status, _, default_retry = ALL.fetch(code)
        payload = body(code)
        headers = { "content-type" => CONTENT_TYPE, "content-length" => payload.bytesize.to_s }
        retry_after ||= default_retry
        headers["retry-after"] = retry_after.to_s if retry_after
        headers.merge!(extra) if extra
        [status, headers, [payload]]
      end
    end
  end
end
