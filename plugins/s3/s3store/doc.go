// Package s3store is goray's S3 storage: objects spilled to a bucket of AWS
// S3 or of any S3-compatible endpoint (MinIO, ...), with minio-go. It
// implements storage.Storage; the goray-storage-s3 plugin binary
// (plugins/s3) serves it.
//
// An object is stored under <prefix>/<key> in the bucket. An object up to
// part_size (default 16 MiB) goes in one PUT; a larger one in a multipart
// upload of part_size parts, `concurrency` of them uploaded in parallel from
// a bounded pool of part buffers shared by all writes. The upload is
// completed only once every byte arrived and the write's context is still
// live; otherwise it is aborted (an upload that is not completed is never
// visible), and an abort that fails because the endpoint is down is retried
// at the next health check. Reads are single ranged GETs.
//
// Configure checks that the credentials work and the bucket exists:
// wrong credentials give storage.ErrPermission naming the access key id
// (never the secret); a missing bucket is an error that says
// create_bucket = true would create it. Credentials come from access_key /
// secret_key / session_token, else from the AWS chain (environment, shared
// credentials file with AWS_PROFILE, IAM role).
//
// Errors: network failures and 5xx answers are storage.ErrUnavailable,
// 403s (AccessDenied, InvalidAccessKeyId, SignatureDoesNotMatch, expired
// tokens) storage.ErrPermission, NoSuchKey storage.ErrNotFound. minio-go
// retries a failed request max_retries times (default 3) before that.
package s3store
