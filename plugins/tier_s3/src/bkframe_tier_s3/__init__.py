"""bkframe-tier-s3: the S3 object-store tier (``s3://BUCKET[/PREFIX]?...``) on the AWS SDK (botocore)."""
